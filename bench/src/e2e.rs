//! End-to-end scenarios: each starts its own daemon(s) with the `[sink]` it
//! needs (an HTTP sink to a loopback [`Receiver`], the built-in file sink,
//! the file plugin; `[sinks.a]`, `[sinks.b]`, `[sinks.c]` for the fan-out)
//! and measures delivery, not just ingest. See
//! `docs/benchmarks.md` for what each one shows and why its target is what
//! it is.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_client::Tier;

use super::context::Ctx;
use super::daemon::{self, BenchDaemon, Launcher, Overrides, RssSampler, NOOP_SINK};
use super::load::{self, LoadError};
use super::receiver::{micros_since, Receiver};
use super::report::{new_histogram, Kind, ReportRow, RATE};
use super::stamped::{self, record_id, Burst, Pace};

/// Payload of the HTTP scenarios' records.
pub(super) const RECORD_BYTES: usize = 256;
/// Requests in flight per paced producer (enough to keep its rate while an
/// ack is awaited; a pipelined producer never waits for an fsync per record).
const PACED_WINDOW: usize = 64;
/// Requests in flight per producer pushing a fixed count.
pub(super) const PUSH_WINDOW: usize = 256;

/// `e2e_slow_downstream`.
const SLOW_PRODUCERS: usize = 16;
const SLOW_OFFERED_PER_S: f64 = 20_000.0;
const SLOW_DELAY: Duration = Duration::from_millis(5);
/// A backlog below this many seconds of the offered load passes whatever
/// its trend: at that size it is what is in flight, not a queue (2,000
/// records for `e2e_slow_downstream`, 10,000 for `e2e_high_latency`).
pub const BACKLOG_FLOOR_S: f64 = 0.1;
/// Seconds of backlog samples compared at the start and at the end.
const BACKLOG_WINDOW_S: usize = 5;

/// `e2e_high_latency`: a far downstream (50 ms per request) under 100,000
/// records/s offered by pipelined producers.
const HIGH_LATENCY_DELAY: Duration = Duration::from_millis(50);
const HIGH_LATENCY_OFFERED_PER_S: f64 = 100_000.0;
const HIGH_LATENCY_PRODUCERS: usize = 8;
/// Requests in flight per producer: 100,000 records/s at a few ms per Sync
/// ack needs several hundred outstanding in all.
const HIGH_LATENCY_WINDOW: usize = 256;

/// `e2e_batched_vs_per_record`.
const COMPARE_PRODUCERS: usize = 4;
const COMPARE_RECORDS: u64 = 20_000;
const COMPARE_RECORDS_QUICK: u64 = 5_000;

/// `e2e_light_load_latency`.
const LIGHT_RATE: f64 = 100.0;

/// `sink_plugin_vs_builtin_file`.
const FILE_RECORDS: u64 = 1_000_000;
const FILE_RECORDS_QUICK: u64 = 200_000;
const FILE_RECORD_BYTES: usize = 100;
const FILE_FRAME: usize = 1000;
const FILE_PRODUCERS: usize = 4;
const FILE_WINDOW: usize = 4;
const PLUGIN_FILE: &str = "libspillway_plugin_file.so";
const DELIVERED_FILE: &str = "delivered.ndjson";
/// Pause between building the backlog and releasing it, so the sealer's
/// preallocation of the next segments (zero-fill + fsync) is not timed.
const SETTLE: Duration = Duration::from_millis(1000);

/// `reload_under_load`.
const RELOAD_RATE: f64 = 5_000.0;
/// The timeline, from the first push: warm-up until `RELOAD_BASELINE.0`,
/// a window with no reload until `.1`, the reload to B at `RELOAD_TO_B`, the
/// reload back to A at `RELOAD_TO_A`, the end at `RELOAD_END` (ms).
const RELOAD_BASELINE: (u64, u64) = (500, 2500);
const RELOAD_TO_B: u64 = 3500;
const RELOAD_TO_A: u64 = 5500;
const RELOAD_END: u64 = 6500;
/// "Around a reload": from this long before its start to this long after its report.
const RELOAD_AROUND_US: u64 = 1_000_000;

/// `e2e_fanout_3`: the sinks of the fan-out phase, in order (the one-sink
/// phase has the first).
pub const FANOUT_SINKS: [&str; 3] = ["a", "b", "c"];
const FANOUT_OFFERED_PER_S: f64 = 20_000.0;
/// Paced producers (connections) sharing the offered load.
const FANOUT_PRODUCERS: usize = 4;
/// Before each phase's measured window: the fresh daemon's first batches,
/// the sinks' first connections.
const FANOUT_WARMUP: Duration = Duration::from_secs(1);
const FANOUT_WARMUP_QUICK: Duration = Duration::from_millis(500);
const FANOUT_RSS_EVERY: Duration = Duration::from_millis(20);

/// How long delivery may take to catch up before a scenario fails.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(300);

pub(super) fn launcher<'a>(ctx: &Ctx<'a>) -> Result<&'a Launcher, LoadError> {
    ctx.launcher
        .ok_or_else(|| LoadError::Unsupported("needs a daemon started by the bench".into()))
}

pub(super) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The `[sink]` body of an HTTP sink to `url`.
pub fn http_sink(url: &str, delivery: &str) -> String {
    format!(
        "type = \"http\"\nurl = {}\ndelivery = \"{delivery}\"\n",
        toml_string(url)
    )
}

pub(super) fn file_sink() -> String {
    format!(
        "type = \"file\"\npath = {}\nfsync = true\n",
        toml_string(DELIVERED_FILE)
    )
}

fn plugin_sink(library: &Path) -> String {
    format!(
        "type = \"plugin\"\npath = {}\n\n[sink.options]\npath = {}\nfsync = true\n",
        toml_string(&library.display().to_string()),
        toml_string(DELIVERED_FILE)
    )
}

pub(super) fn start(
    launcher: &Launcher,
    label: &str,
    sink: String,
) -> Result<BenchDaemon, LoadError> {
    launcher
        .start(
            label,
            &Overrides {
                sink_toml: Some(sink),
                ..Overrides::default()
            },
        )
        .map_err(|e| LoadError::Failed(format!("starting the {label} daemon: {e}")))
}

/// A loopback address nobody listens on now, for a network door of a
/// bench daemon: below the ephemeral range (see
/// [`spillway_test_http::port`]), where the bench's own client
/// connections cannot be given the port before the daemon binds it.
pub(super) fn free_loopback_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], spillway_test_http::free_port()))
}

pub(super) fn stop_daemon(daemon: BenchDaemon, label: &str) -> Result<(), LoadError> {
    daemon
        .stop()
        .map_err(|e| LoadError::Failed(format!("stopping the {label} daemon: {e}")))
}

/// Sleeps until `until`; false if `stop` was raised first.
pub(super) fn sleep_until(until: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(10)));
    }
}

/// Polls `done` every `every` until it is true; how long that took.
pub(super) fn wait_for(
    what: &str,
    every: Duration,
    mut done: impl FnMut() -> Result<bool, String>,
) -> Result<Duration, LoadError> {
    let start = Instant::now();
    loop {
        if done()? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > DELIVERY_TIMEOUT {
            return Err(LoadError::Failed(format!(
                "{what}: not done within {DELIVERY_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(every);
    }
}

/// Sum of the `sink{sink="S",shard="N"}.delivered_records` lines of `ctl
/// stats` (every sink's, every shard's).
pub(super) fn delivered_records(admin_socket: &Path) -> Result<u64, String> {
    let body = spillway_ctl::call(admin_socket, "stats").map_err(|e| format!("ctl stats: {e}"))?;
    Ok(parse_delivered(&body))
}

fn parse_delivered(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            let per_shard = key.starts_with("sink{")
                && key.contains("shard=")
                && key.ends_with("}.delivered_records");
            per_shard
                .then(|| value.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// Each sink's `sink{sink="NAME"}.delivered_records` total of `ctl stats`.
fn sink_delivered(admin_socket: &Path) -> Result<BTreeMap<String, u64>, String> {
    let body = spillway_ctl::call(admin_socket, "stats").map_err(|e| format!("ctl stats: {e}"))?;
    Ok(parse_sink_delivered(&body))
}

/// The per-sink totals (`sink{sink="NAME"}.delivered_records V`), by sink
/// name; the per-shard lines (`sink{sink="NAME",shard="N"}...`) are not
/// totals and are left out.
pub fn parse_sink_delivered(stats: &str) -> BTreeMap<String, u64> {
    stats
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            let name = key
                .strip_prefix("sink{sink=\"")?
                .strip_suffix("\"}.delivered_records")?;
            if name.contains('"') {
                return None;
            }
            Some((name.to_string(), value.trim().parse::<u64>().ok()?))
        })
        .collect()
}

/// `spillway ctl --config <config> reload`, as an operator would run it.
fn ctl_reload(exe: &Path, config: &Path) -> Result<String, String> {
    let out = Command::new(exe)
        .arg("ctl")
        .arg("--config")
        .arg(config)
        .arg("reload")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {} ctl reload: {e}", exe.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "spillway ctl reload ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Notes what a receiver could not make sense of (there should be nothing).
fn check_receiver(o: &mut ReportRow, which: &str, r: &Receiver, stamped: bool) {
    let who = if which.is_empty() {
        "the receiver".to_string()
    } else {
        format!("receiver {which}")
    };
    if r.bad_requests() > 0 {
        o.note(format!(
            "{who} refused {} requests it could not parse",
            r.bad_requests()
        ));
    }
    if stamped && r.unstamped() > 0 {
        o.note(format!(
            "{who} got {} records without a stamp",
            r.unstamped()
        ));
    }
}

// ---------------------------------------------------------------------------
// e2e_slow_downstream

/// What the sampler saw during the measured window.
struct Window {
    seconds: f64,
    acked: u64,
    delivered: u64,
    requests: u64,
    /// acked − delivered, once a second.
    backlog: Vec<i64>,
    backlog_end: i64,
}

/// The largest backlog of the first and of the last `BACKLOG_WINDOW_S`
/// samples (half the samples each if there are fewer than twice that).
pub fn backlog_windows(samples: &[i64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let k = (samples.len() / 2).clamp(1, BACKLOG_WINDOW_S);
    let max = |s: &[i64]| s.iter().copied().max().unwrap_or(0).max(0) as f64;
    (max(&samples[..k]), max(&samples[samples.len() - k..]))
}

/// A paced Sync load into a daemon whose HTTP sink's receiver holds every
/// request a while: what `e2e_slow_downstream` and `e2e_high_latency`
/// measure, each with its own figures.
struct Downstream<'a> {
    /// The row's name, and the daemon's label.
    name: &'a str,
    /// How long the receiver holds every request.
    delay: Duration,
    offered_per_s: f64,
    producers: usize,
    window: usize,
    /// Extra keys of the `[sink]` table (after the HTTP sink's own).
    sink_extra: &'a str,
}

/// Runs `spec`: warm-up, then `measured` long with the backlog (acked −
/// arrived) sampled once a second; then the time until every acked record
/// arrived. One row.
fn downstream(
    launcher: &Launcher,
    spec: &Downstream,
    warmup: Duration,
    measured: Duration,
) -> Result<ReportRow, LoadError> {
    let epoch = Instant::now();
    let receiver = Receiver::start(epoch, spec.delay, false)?;
    let sink = format!(
        "{}{}",
        http_sink(&receiver.url(), "batched"),
        spec.sink_extra
    );
    // The label names the daemon's folder.
    let label = spec.name.replace('/', "-");
    let daemon = start(launcher, &label, sink)?;
    let (socket, admin) = (
        daemon.socket().to_path_buf(),
        daemon.admin_socket().to_path_buf(),
    );
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let pace = |i: usize| Pace {
        producer: i as u64,
        rate: spec.offered_per_s / spec.producers as f64,
        size: RECORD_BYTES,
        window: spec.window,
        tier: Tier::Sync,
        ack_times: false,
        latency_from_us: None,
    };
    let producer = |i: usize| stamped::paced(&socket, pace(i), epoch, &stop, &acked);
    let (sent, window) = stamped::with_producers(spec.producers, &stop, producer, || {
        downstream_window(&receiver, &acked, &stop, epoch, warmup, measured)
    });
    let sent = sent?;
    let w = window.ok_or_else(|| LoadError::Failed("the producers stopped early".into()))?;
    // The limits the sink's cursors reached, before the backlog drains.
    let limits = in_flight_limits(&admin).ok();
    let drain = wait_for(
        "delivering the rest after the producers stopped",
        Duration::from_millis(5),
        || Ok(receiver.records() >= sent.acked),
    )?;
    let (first, last) = backlog_windows(&w.backlog);
    let mut o = ReportRow::new(spec.name, Kind::Scenario);
    o.set(RATE, w.acked as f64 / w.seconds)
        .set("offered_records_per_s", spec.offered_per_s)
        .set("backlog_floor", spec.offered_per_s * BACKLOG_FLOOR_S)
        .set("delivered_per_s", w.delivered as f64 / w.seconds)
        .set("delivery_ratio", w.delivered as f64 / w.acked.max(1) as f64)
        .set("backlog_end", w.backlog_end as f64)
        .set("backlog_first_max", first)
        .set("backlog_last_max", last)
        .set(
            "backlog_peak",
            w.backlog.iter().copied().max().unwrap_or(0) as f64,
        )
        .set(
            "records_per_request",
            w.delivered as f64 / w.requests.max(1) as f64,
        )
        .set("http_requests", w.requests as f64)
        .set("records", w.acked as f64)
        .set("elapsed_s", w.seconds)
        .set("nacks", (sent.overloaded + sent.other_nacks) as f64)
        .set("drain_after_stop_ms", drain.as_secs_f64() * 1000.0)
        .set_latency("", &receiver.latency());
    if let Some(limits) = limits {
        o.set("in_flight_limit_sum", limits.iter().sum::<u64>() as f64)
            .set(
                "in_flight_limit_max",
                limits.iter().copied().max().unwrap_or(0) as f64,
            );
    }
    check_receiver(&mut o, "", &receiver, true);
    stop_daemon(daemon, &label)?;
    Ok(o)
}

/// After `warmup`, `measured` seconds of acks and deliveries, the backlog
/// (acked, not yet delivered) sampled each second; `None` when the
/// producers stopped first.
fn downstream_window(
    receiver: &Receiver,
    acked: &AtomicU64,
    stop: &AtomicBool,
    epoch: Instant,
    warmup: Duration,
    measured: Duration,
) -> Option<Window> {
    if !sleep_until(Instant::now() + warmup, stop) {
        return None;
    }
    let t0 = Instant::now();
    let (d0, q0, a0) = (
        receiver.records(),
        receiver.requests(),
        acked.load(Ordering::Acquire),
    );
    receiver.measure_from(micros_since(epoch));
    let mut backlog = Vec::new();
    for second in 1..=measured.as_secs() {
        if !sleep_until(t0 + Duration::from_secs(second), stop) {
            return None;
        }
        // Delivered first: a record is acked before it can arrive.
        let delivered = receiver.records();
        backlog.push(acked.load(Ordering::Acquire) as i64 - delivered as i64);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let (d1, q1) = (receiver.records(), receiver.requests());
    let a1 = acked.load(Ordering::Acquire);
    Some(Window {
        seconds,
        acked: a1 - a0,
        delivered: d1 - d0,
        requests: q1 - q0,
        backlog,
        backlog_end: a1 as i64 - d1 as i64,
    })
}

/// Each shard's `batches_in_flight_limit` of the `default` sink.
fn in_flight_limits(admin_socket: &Path) -> Result<Vec<u64>, String> {
    let body = spillway_ctl::call(admin_socket, "stats").map_err(|e| format!("ctl stats: {e}"))?;
    Ok(parse_in_flight_limits(&body))
}

fn parse_in_flight_limits(stats: &str) -> Vec<u64> {
    stats
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            let per_shard = key.starts_with("sink{sink=\"default\",shard=")
                && key.ends_with("}.batches_in_flight_limit");
            per_shard.then(|| value.trim().parse().ok()).flatten()
        })
        .collect()
}

/// 16 paced producers (20,000 records/s of 256 B at Sync in total) into a
/// daemon whose HTTP sink's receiver takes 5 ms per request.
pub fn slow_downstream(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let (warmup, measured) = if ctx.quick {
        (Duration::from_secs(1), Duration::from_secs(5))
    } else {
        (Duration::from_secs(2), Duration::from_secs(30))
    };
    let spec = Downstream {
        name: "e2e_slow_downstream",
        delay: SLOW_DELAY,
        offered_per_s: SLOW_OFFERED_PER_S,
        producers: SLOW_PRODUCERS,
        window: PACED_WINDOW,
        sink_extra: "",
    };
    Ok(vec![downstream(launcher, &spec, warmup, measured)?])
}

// ---------------------------------------------------------------------------
// e2e_high_latency

/// The same paced load (100,000 records/s of 256 B offered, pipelined)
/// into a receiver that answers every request after 50 ms, once with
/// `batches_in_flight = "adaptive"` and once with one batch at a time per
/// shard, alternating which goes first from one repeat to the next. Two
/// rows; the adaptive one holds the comparison.
pub fn high_latency(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let (warmup, measured) = if ctx.quick {
        (Duration::from_secs(1), Duration::from_secs(5))
    } else {
        (Duration::from_secs(3), Duration::from_secs(15))
    };
    let spec = |name, sink_extra| Downstream {
        name,
        delay: HIGH_LATENCY_DELAY,
        offered_per_s: HIGH_LATENCY_OFFERED_PER_S,
        producers: HIGH_LATENCY_PRODUCERS,
        window: HIGH_LATENCY_WINDOW,
        sink_extra,
    };
    let adaptive = spec(
        "e2e_high_latency/adaptive",
        "batches_in_flight = \"adaptive\"\n",
    );
    let one = spec("e2e_high_latency/one_at_a_time", "batches_in_flight = 1\n");
    let run = |s: &Downstream| downstream(launcher, s, warmup, measured);
    let (mut a, o) = if ctx.round.is_multiple_of(2) {
        let a = run(&adaptive)?;
        (a, run(&one)?)
    } else {
        let o = run(&one)?;
        (run(&adaptive)?, o)
    };
    if let Some(r) = o.get("delivery_ratio") {
        a.set("one_at_a_time_delivery_ratio", r);
    }
    if let Some(r) = o.get("delivered_per_s") {
        a.set("one_at_a_time_delivered_per_s", r);
    }
    Ok(vec![a, o])
}

// ---------------------------------------------------------------------------
// e2e_batched_vs_per_record

/// One backlog delivery: how long the receiver took to get every record.
pub(super) struct Drained {
    pub records: u64,
    bad_requests: u64,
    pub elapsed: Duration,
    requests: u64,
    push: Duration,
}

/// Pushes `count` records while the receiver holds every request (the
/// drains block on their first batch), then opens it and times until the
/// last record arrived.
pub(super) fn drain_backlog(
    launcher: &Launcher,
    delivery: &str,
    count: u64,
) -> Result<Drained, LoadError> {
    let epoch = Instant::now();
    let receiver = Receiver::start(epoch, Duration::ZERO, false)?;
    receiver.close_gate();
    let label = format!("e2e-{delivery}");
    let daemon = start(launcher, &label, http_sink(&receiver.url(), delivery))?;
    let socket = daemon.socket().to_path_buf();
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let per_producer = count / COMPARE_PRODUCERS as u64;
    let pushing = Instant::now();
    let burst = |i: usize| Burst {
        producer: i as u64,
        count: per_producer,
        size: RECORD_BYTES,
        per_frame: 1,
        window: PUSH_WINDOW,
    };
    let producer = |i: usize| stamped::push_all(&socket, burst(i), epoch, &acked);
    let (sent, ()) = stamped::with_producers(COMPARE_PRODUCERS, &stop, producer, || ());
    let push = pushing.elapsed();
    let opened = Instant::now();
    receiver.open_gate();
    let sent = sent?;
    wait_for(
        &format!("{delivery} delivery of the backlog"),
        Duration::from_millis(1),
        || Ok(receiver.records() >= sent.acked),
    )?;
    let elapsed = receiver
        .last_arrival()
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(opened));
    let (requests, bad_requests) = (receiver.requests(), receiver.bad_requests());
    stop_daemon(daemon, &label)?;
    Ok(Drained {
        records: sent.acked,
        bad_requests,
        elapsed,
        requests,
        push,
    })
}

fn drained_row(name: &str, d: &Drained) -> ReportRow {
    let mut o = ReportRow::new(name, Kind::Scenario);
    let seconds = d.elapsed.as_secs_f64().max(1e-9);
    o.set(RATE, d.records as f64 / seconds)
        .set("us_per_record", seconds * 1e6 / d.records.max(1) as f64)
        .set("records", d.records as f64)
        .set("elapsed_s", seconds)
        .set("http_requests", d.requests as f64)
        .set(
            "records_per_request",
            d.records as f64 / d.requests.max(1) as f64,
        )
        .set("push_s", d.push.as_secs_f64());
    if d.bad_requests > 0 {
        o.note(format!(
            "the receiver refused {} requests it could not parse",
            d.bad_requests
        ));
    }
    o
}

/// The same backlog delivered batched and per record, alternating which
/// goes first from one repeat to the next.
pub fn batched_vs_per_record(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let count = if ctx.quick {
        COMPARE_RECORDS_QUICK
    } else {
        COMPARE_RECORDS
    };
    let (batched, per_record) = if ctx.round.is_multiple_of(2) {
        let b = drain_backlog(launcher, "batched", count)?;
        (b, drain_backlog(launcher, "per_record", count)?)
    } else {
        let p = drain_backlog(launcher, "per_record", count)?;
        (drain_backlog(launcher, "batched", count)?, p)
    };
    let mut b = drained_row("e2e_batched_vs_per_record/batched", &batched);
    let p = drained_row("e2e_batched_vs_per_record/per_record", &per_record);
    let speedup =
        p.get("us_per_record").unwrap_or(0.0) / b.get("us_per_record").unwrap_or(f64::INFINITY);
    b.set("speedup", speedup);
    Ok(vec![b, p])
}

// ---------------------------------------------------------------------------
// e2e_light_load_latency

/// One producer at 100 records/s into a batched HTTP sink whose receiver
/// answers at once: push→arrival latency when nothing queues.
pub fn light_load_latency(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let measured = Duration::from_secs(if ctx.quick { 3 } else { 10 });
    let warmup = Duration::from_millis(500);
    let epoch = Instant::now();
    let receiver = Receiver::start(epoch, Duration::ZERO, false)?;
    let daemon = start(launcher, "e2e-light", http_sink(&receiver.url(), "batched"))?;
    let socket = daemon.socket().to_path_buf();
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let pace = Pace {
        producer: 0,
        rate: LIGHT_RATE,
        size: RECORD_BYTES,
        window: 8,
        tier: Tier::Sync,
        ack_times: false,
        latency_from_us: None,
    };
    let (sent, window) = stamped::with_producers(
        1,
        &stop,
        |_| stamped::paced(&socket, pace, epoch, &stop, &acked),
        || {
            if !sleep_until(Instant::now() + warmup, &stop) {
                return None;
            }
            let (t0, a0) = (Instant::now(), acked.load(Ordering::Acquire));
            receiver.measure_from(micros_since(epoch));
            sleep_until(t0 + measured, &stop)
                .then(|| (acked.load(Ordering::Acquire) - a0, t0.elapsed()))
        },
    );
    let sent = sent?;
    let (records, elapsed) =
        window.ok_or_else(|| LoadError::Failed("the producer stopped early".into()))?;
    wait_for(
        "delivering the last records",
        Duration::from_millis(2),
        || Ok(receiver.records() >= sent.acked),
    )?;
    let mut o = ReportRow::new("e2e_light_load_latency", Kind::Scenario);
    o.set(RATE, records as f64 / elapsed.as_secs_f64())
        .set("records", records as f64)
        .set("elapsed_s", elapsed.as_secs_f64())
        .set("nacks", (sent.overloaded + sent.other_nacks) as f64)
        .set(
            "records_per_request",
            receiver.records() as f64 / receiver.requests().max(1) as f64,
        )
        .set_latency("", &receiver.latency());
    check_receiver(&mut o, "", &receiver, true);
    stop_daemon(daemon, "e2e-light")?;
    Ok(vec![o])
}

// ---------------------------------------------------------------------------
// ingest_http_vs_noop

/// `single_thread_sync` against a daemon delivering to an HTTP receiver and
/// against one with the noop sink, alternating which goes first.
pub fn ingest_http_vs_noop(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let receiver = Receiver::start(Instant::now(), Duration::ZERO, false)?;
    let http = start(
        launcher,
        "ingest-http",
        http_sink(&receiver.url(), "batched"),
    )?;
    let noop = start(launcher, "ingest-noop", NOOP_SINK.to_string())?;
    let measure = |d: &BenchDaemon| load::serial_push(d.socket(), Tier::Sync, ctx.plan);
    let (h, n) = if ctx.round.is_multiple_of(2) {
        let h = measure(&http)?;
        (h, measure(&noop)?)
    } else {
        let n = measure(&noop)?;
        (measure(&http)?, n)
    };
    let p50_us = |s: &load::Sample| s.latency.value_at_quantile(0.5) as f64 / 1000.0;
    let mut o = h.to_outcome("ingest_http_vs_noop");
    o.set("noop_p50_us", p50_us(&n))
        .set("noop_records_per_s", n.rate())
        .set("p50_ratio", p50_us(&h) / p50_us(&n))
        .set("delivered", receiver.records() as f64);
    check_receiver(&mut o, "", &receiver, false);
    stop_daemon(noop, "ingest-noop")?;
    stop_daemon(http, "ingest-http")?;
    Ok(vec![o])
}

// ---------------------------------------------------------------------------
// sink_plugin_vs_builtin_file

/// The file plugin, next to the running executable.
fn plugin_library(exe: &Path) -> Result<PathBuf, LoadError> {
    let dir = exe
        .parent()
        .ok_or_else(|| LoadError::Failed(format!("{} has no folder", exe.display())))?;
    let library = dir.join(PLUGIN_FILE);
    if library.is_file() {
        Ok(library)
    } else {
        Err(LoadError::Unsupported(format!(
            "no {PLUGIN_FILE} in {}: build it with cargo build --release -p spillway-plugin-file",
            dir.display()
        )))
    }
}

/// One file delivery run.
struct FileRun {
    /// Records delivered by the sink under test.
    records: u64,
    /// From the release of the backlog to every record delivered.
    elapsed: Duration,
    /// Pushing the backlog.
    push: Duration,
    /// Records of the held first batches, which went to the receiver.
    via_http: u64,
    file_bytes: u64,
}

/// Builds a backlog of `count` records of 100 B (PushBatch of 1000, 4
/// connections) while the daemon's sink is HTTP to a receiver that holds
/// every request (each drain blocks on its first batch), switches the sink
/// to `sink` with `ctl reload`, releases the receiver and times until
/// `ctl stats` counts every record delivered. The held first batches go to
/// the receiver; everything after them to `sink`.
fn file_delivery(
    launcher: &Launcher,
    label: &str,
    sink: &str,
    count: u64,
) -> Result<FileRun, LoadError> {
    let epoch = Instant::now();
    let receiver = Receiver::start(epoch, Duration::ZERO, false)?;
    receiver.close_gate();
    let daemon = start(launcher, label, http_sink(&receiver.url(), "batched"))?;
    let socket = daemon.socket().to_path_buf();
    let admin = daemon.admin_socket().to_path_buf();
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let per_producer = count / FILE_PRODUCERS as u64;
    let pushing = Instant::now();
    let burst = |i: usize| Burst {
        producer: i as u64,
        count: per_producer,
        size: FILE_RECORD_BYTES,
        per_frame: FILE_FRAME,
        window: FILE_WINDOW,
    };
    let producer = |i: usize| stamped::push_all(&socket, burst(i), epoch, &acked);
    let (sent, ()) = stamped::with_producers(FILE_PRODUCERS, &stop, producer, || ());
    let push = pushing.elapsed();
    if sent.is_ok() {
        std::thread::sleep(SETTLE);
    }
    let switched = match &sent {
        Ok(_) => daemon
            .rewrite_sink(sink)
            .and_then(|()| ctl_reload(&launcher.exe, daemon.config_path())),
        Err(_) => Ok(String::new()),
    };
    let opened = Instant::now();
    receiver.open_gate();
    let sent = sent?;
    switched.map_err(|e| {
        LoadError::Failed(format!("{label}: switching to the sink under test: {e}"))
    })?;
    wait_for(
        &format!("{label}: delivering every record"),
        Duration::from_millis(2),
        || Ok(delivered_records(&admin)? >= sent.acked),
    )?;
    let elapsed = opened.elapsed();
    let via_http = receiver.records();
    let file_bytes = std::fs::metadata(daemon.dir().join(DELIVERED_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    stop_daemon(daemon, label)?;
    Ok(FileRun {
        records: sent.acked.saturating_sub(via_http),
        elapsed,
        push,
        via_http,
        file_bytes,
    })
}

fn file_rate(run: &FileRun) -> f64 {
    run.records as f64 / run.elapsed.as_secs_f64().max(1e-9)
}

/// Every `[sink]` body the end-to-end scenarios write (the plugin's with a
/// placeholder library path), for the daemon's own test that it accepts
/// each of them.
pub fn sink_tables() -> Vec<String> {
    vec![
        NOOP_SINK.to_string(),
        http_sink("http://127.0.0.1:9/ingest", "batched"),
        http_sink("http://127.0.0.1:9/x", "per_record"),
        file_sink(),
        plugin_sink(Path::new("/x/lib a.so")),
    ]
}

/// Delivery through the example file plugin vs the built-in file sink,
/// alternating which goes first.
pub fn plugin_vs_builtin_file(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let library = plugin_library(&launcher.exe)?;
    let plugin = plugin_sink(&library);
    if let Err(e) = launcher.check_sink(&plugin) {
        return Err(LoadError::Unsupported(format!(
            "this daemon does not accept type = \"plugin\" yet: {e}"
        )));
    }
    let count = if ctx.quick {
        FILE_RECORDS_QUICK
    } else {
        FILE_RECORDS
    };
    let builtin_sink = file_sink();
    let (builtin, plug) = if ctx.round.is_multiple_of(2) {
        let b = file_delivery(launcher, "file-builtin", &builtin_sink, count)?;
        (b, file_delivery(launcher, "file-plugin", &plugin, count)?)
    } else {
        let p = file_delivery(launcher, "file-plugin", &plugin, count)?;
        (
            file_delivery(launcher, "file-builtin", &builtin_sink, count)?,
            p,
        )
    };
    let mut o = ReportRow::new("sink_plugin_vs_builtin_file", Kind::Scenario);
    o.set(RATE, file_rate(&plug))
        .set("builtin_records_per_s", file_rate(&builtin))
        .set("ratio", file_rate(&plug) / file_rate(&builtin))
        .set("records", plug.records as f64)
        .set("elapsed_s", plug.elapsed.as_secs_f64())
        .set("builtin_records", builtin.records as f64)
        .set("builtin_elapsed_s", builtin.elapsed.as_secs_f64())
        .set("push_s", plug.push.as_secs_f64())
        .set("builtin_push_s", builtin.push.as_secs_f64())
        .set("via_http", plug.via_http as f64)
        .set("builtin_via_http", builtin.via_http as f64);
    for (which, run) in [("plugin", &plug), ("built-in", &builtin)] {
        let expected = run.records * (FILE_RECORD_BYTES as u64 + 1);
        if run.file_bytes != expected {
            o.note(format!(
                "{which}: {DELIVERED_FILE} has {} bytes, expected {expected}",
                run.file_bytes
            ));
        }
    }
    Ok(vec![o])
}

// ---------------------------------------------------------------------------
// reload_under_load

/// When each reload started and when `ctl reload` reported it done (µs
/// since the epoch).
struct Reloads {
    /// When pushing began.
    begin: u64,
    to_b: (u64, u64),
    to_a: (u64, u64),
    pushing: Duration,
}

/// The longest gap between consecutive acks (µs since the epoch, in order)
/// whose later ack falls in `from..=to`.
pub fn longest_gap(acks: &[u64], from: u64, to: u64) -> u64 {
    acks.windows(2)
        .filter(|w| (from..=to).contains(&w[1]))
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// A pipelined producer at 5,000 records/s while the sink is switched from
/// receiver A to B and back with `ctl reload`.
pub fn reload_under_load(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let epoch = Instant::now();
    let a = Receiver::start(epoch, Duration::ZERO, true)?;
    let b = Receiver::start(epoch, Duration::ZERO, true)?;
    let sinks = [
        http_sink(&a.url(), "batched"),
        http_sink(&b.url(), "batched"),
    ];
    let daemon = start(launcher, "reload", sinks[0].clone())?;
    let (sent, r) = push_through_reloads(launcher, &daemon, epoch, &sinks)?;
    let lost = lost_after_reloads(&sent, &a, &b);
    let mut o = reload_row(&sent, &r, &a, &b, lost)?;
    check_receiver(&mut o, "A", &a, true);
    check_receiver(&mut o, "B", &b, true);
    stop_daemon(daemon, "reload")?;
    Ok(vec![o])
}

/// A paced producer on `daemon` while its sink is switched to `sinks[1]`
/// and back to `sinks[0]` by reloads at fixed times.
fn push_through_reloads(
    launcher: &Launcher,
    daemon: &BenchDaemon,
    epoch: Instant,
    sinks: &[String; 2],
) -> Result<(stamped::Sent, Reloads), LoadError> {
    let socket = daemon.socket().to_path_buf();
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let pace = Pace {
        producer: 0,
        rate: RELOAD_RATE,
        size: RECORD_BYTES,
        window: PACED_WINDOW,
        tier: Tier::Sync,
        ack_times: true,
        latency_from_us: None,
    };
    let switch = |sink: &str| -> Result<(u64, u64), String> {
        let started = micros_since(epoch);
        daemon.rewrite_sink(sink)?;
        ctl_reload(&launcher.exe, daemon.config_path())?;
        Ok((started, micros_since(epoch)))
    };
    let (sent, reloads) = stamped::with_producers(
        1,
        &stop,
        |_| stamped::paced(&socket, pace, epoch, &stop, &acked),
        || {
            let (begin, begin_us) = (Instant::now(), micros_since(epoch));
            let at = |ms: u64| {
                let reached = sleep_until(begin + Duration::from_millis(ms), &stop);
                reached
                    .then_some(())
                    .ok_or_else(|| "the producer stopped early".to_string())
            };
            at(RELOAD_TO_B)?;
            let to_b = switch(&sinks[1])?;
            at(RELOAD_TO_A)?;
            let to_a = switch(&sinks[0])?;
            at(RELOAD_END)?;
            Ok::<_, String>(Reloads {
                begin: begin_us,
                to_b,
                to_a,
                pushing: begin.elapsed(),
            })
        },
    );
    let sent = sent?;
    let r = reloads.map_err(|e| LoadError::Failed(format!("{e}\n{}", daemon.log_excerpt())))?;
    Ok((sent, r))
}

/// Acked records that reached neither A nor B, once every acked record
/// arrived or the wait gave up.
fn lost_after_reloads(sent: &stamped::Sent, a: &Receiver, b: &Receiver) -> usize {
    let nacked: HashSet<u64> = sent.nacked_ids.iter().copied().collect();
    let expected: Vec<u64> = (0..sent.sent)
        .map(|n| record_id(0, n))
        .filter(|id| !nacked.contains(id))
        .collect();
    let missing = || {
        let (ids_a, ids_b) = (a.ids(), b.ids());
        expected
            .iter()
            .filter(|id| !ids_a.contains_key(id) && !ids_b.contains_key(id))
            .count()
    };
    // Every acked record should arrive; stop waiting early only once they all have.
    let _ = wait_for(
        "delivering every acked record to A or B",
        Duration::from_millis(20),
        || Ok(a.records() + b.records() >= sent.acked && missing() == 0),
    );
    missing()
}

/// The row: rates, the ack gaps each reload caused against a stretch with
/// none near, what arrived where.
fn reload_row(
    sent: &stamped::Sent,
    r: &Reloads,
    a: &Receiver,
    b: &Receiver,
    lost: usize,
) -> Result<ReportRow, LoadError> {
    let (ids_a, ids_b) = (a.ids(), b.ids());
    // Pushed after the switch to B was reported: at A only if it arrived after the switch back began.
    let late_at_a = ids_a
        .values()
        .filter(|r1| r1.sent_us > r.to_b.1 && r1.arrived_us < r.to_a.0)
        .count();
    // Pushed after the switch back to A was reported: never at B.
    let late_at_b = ids_b.values().filter(|r2| r2.sent_us > r.to_a.1).count();
    let in_both = ids_a.keys().filter(|id| ids_b.contains_key(id)).count() as u64;
    let acks = &sent.ack_times_us;
    // Gaps a reload can cause end after it started: from its start to 1 s after its report.
    let after = |(started, done): (u64, u64)| longest_gap(acks, started, done + RELOAD_AROUND_US);
    let (gap_b, gap_a) = (after(r.to_b), after(r.to_a));
    // The 2 s around it: also the second before it started.
    let around = |(started, done): (u64, u64)| {
        longest_gap(
            acks,
            started.saturating_sub(RELOAD_AROUND_US),
            done + RELOAD_AROUND_US,
        )
    };
    let around_max = around(r.to_b).max(around(r.to_a));
    // The same with no reload near: 2 s before the first reload's window.
    let (base_from, base_to) = (
        r.begin + RELOAD_BASELINE.0 * 1000,
        r.begin + RELOAD_BASELINE.1 * 1000,
    );
    let baseline = longest_gap(acks, base_from, base_to);
    let mut latency = new_histogram();
    for part in [a.latency(), b.latency()] {
        latency
            .add(part)
            .map_err(|e| LoadError::Failed(format!("merging latencies: {e}")))?;
    }
    let mut o = ReportRow::new("reload_under_load", Kind::Scenario);
    o.set(RATE, sent.acked as f64 / r.pushing.as_secs_f64())
        .set("records", sent.acked as f64)
        .set("elapsed_s", r.pushing.as_secs_f64())
        .set("max_ack_gap_ms", ms(gap_a.max(gap_b)))
        .set("max_ack_gap_worst_ms", ms(gap_a.max(gap_b)))
        .set("ack_gap_to_b_ms", ms(gap_b))
        .set("ack_gap_to_a_ms", ms(gap_a))
        .set("around_ack_gap_ms", ms(around_max))
        .set("baseline_ack_gap_ms", ms(baseline))
        .set("reload_to_b_ms", ms(r.to_b.1 - r.to_b.0))
        .set("reload_to_a_ms", ms(r.to_a.1 - r.to_a.0))
        .set("overloaded_nacks", sent.overloaded as f64)
        .set("nacks", (sent.overloaded + sent.other_nacks) as f64)
        .set("lost_records", lost as f64)
        .set("misrouted_records", (late_at_a + late_at_b) as f64)
        .set(
            "duplicates",
            (a.duplicates() + b.duplicates() + in_both) as f64,
        )
        .set("at_a", ids_a.len() as f64)
        .set("at_b", ids_b.len() as f64)
        .set_latency("", &latency);
    Ok(o)
}

// ---------------------------------------------------------------------------
// e2e_fanout_3

/// `[sinks.NAME]` tables for `e2e_fanout_3`: batched HTTP to each URL, named
/// after [`FANOUT_SINKS`] in order.
pub fn fanout_sinks(urls: &[String]) -> Vec<(String, String)> {
    assert!(
        urls.len() <= FANOUT_SINKS.len(),
        "{} URLs for {} sink names",
        urls.len(),
        FANOUT_SINKS.len()
    );
    FANOUT_SINKS
        .iter()
        .zip(urls)
        .map(|(name, url)| (name.to_string(), http_sink(url, "batched")))
        .collect()
}

/// What one phase of `e2e_fanout_3` measured, over its window.
struct FanoutPhase {
    seconds: f64,
    /// Records acked during the window.
    acked: u64,
    /// Send → ack of the records sent from the window's start on, ns.
    ack_latency: hdrhistogram::Histogram<u64>,
    /// Records each receiver got during the window, in sink order.
    delivered: Vec<u64>,
    nacks: u64,
    /// From the producers' stop until every sink had every acked record.
    drain_after_stop: Duration,
    /// The daemon's read bytes (`rchar`) during the window, where readable.
    read_bytes: Option<u64>,
    rss_peak_kib: u64,
    notes: Vec<String>,
}

/// Figures the measuring thread takes at the window's edges.
struct FanoutWindow {
    seconds: f64,
    acked: u64,
    delivered: Vec<u64>,
    read_bytes: Option<u64>,
    rss_peak_kib: u64,
}

/// A fresh daemon with `sinks` batched HTTP sinks (`[sinks.a]` ...), each
/// to a receiver of its own that answers at once, under the paced Sync load
/// of [`FANOUT_PRODUCERS`] connections, 20,000 records/s of 256 B in all:
/// warm-up, then `measured` long; then waits until every sink has every
/// acked record (the receivers' counts and `ctl stats`' per-sink totals).
fn fanout_phase(
    launcher: &Launcher,
    sinks: usize,
    warmup: Duration,
    measured: Duration,
) -> Result<FanoutPhase, LoadError> {
    let epoch = Instant::now();
    let receivers = (0..sinks)
        .map(|_| Receiver::start(epoch, Duration::ZERO, false))
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = receivers.iter().map(Receiver::url).collect();
    let label = format!("fanout-{sinks}");
    let overrides = Overrides {
        named_sinks: fanout_sinks(&urls),
        ..Overrides::default()
    };
    let daemon = launcher
        .start(&label, &overrides)
        .map_err(|e| LoadError::Failed(format!("starting the {label} daemon: {e}")))?;
    let (socket, admin, pid) = (
        daemon.socket().to_path_buf(),
        daemon.admin_socket().to_path_buf(),
        daemon.pid(),
    );
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let warm_until = Instant::now() + warmup;
    let pace = |i: usize| Pace {
        producer: i as u64,
        rate: FANOUT_OFFERED_PER_S / FANOUT_PRODUCERS as f64,
        size: RECORD_BYTES,
        window: PACED_WINDOW,
        tier: Tier::Sync,
        ack_times: false,
        latency_from_us: Some(micros_since(epoch) + warmup.as_micros() as u64),
    };
    let producer = |i: usize| stamped::paced(&socket, pace(i), epoch, &stop, &acked);
    let delivered_now = || -> Vec<u64> { receivers.iter().map(Receiver::records).collect() };
    let (sent, window) = stamped::with_producers(FANOUT_PRODUCERS, &stop, producer, || {
        if !sleep_until(warm_until, &stop) {
            return None;
        }
        let rss = RssSampler::start(pid, FANOUT_RSS_EVERY);
        let t0 = Instant::now();
        let (d0, a0, r0) = (
            delivered_now(),
            acked.load(Ordering::Acquire),
            daemon::read_bytes(pid),
        );
        let reached = sleep_until(t0 + measured, &stop);
        // Delivered first: a record is acked before it can arrive.
        let d1 = delivered_now();
        let (a1, r1) = (acked.load(Ordering::Acquire), daemon::read_bytes(pid));
        let seconds = t0.elapsed().as_secs_f64();
        let rss_peak_kib = rss.finish();
        reached.then(|| FanoutWindow {
            seconds,
            acked: a1 - a0,
            delivered: d1.iter().zip(&d0).map(|(d1, d0)| d1 - d0).collect(),
            read_bytes: r0.zip(r1).map(|(r0, r1)| r1.saturating_sub(r0)),
            rss_peak_kib,
        })
    });
    let sent = sent?;
    let w = window.ok_or_else(|| LoadError::Failed("the producers stopped early".into()))?;
    let (drain_after_stop, notes) = fanout_settled(
        &label,
        &FANOUT_SINKS[..sinks],
        &receivers,
        &admin,
        sent.acked,
    )?;
    stop_daemon(daemon, &label)?;
    Ok(FanoutPhase {
        seconds: w.seconds,
        acked: w.acked,
        ack_latency: sent.ack_latency,
        delivered: w.delivered,
        nacks: sent.overloaded + sent.other_nacks,
        drain_after_stop,
        read_bytes: w.read_bytes,
        rss_peak_kib: w.rss_peak_kib,
        notes,
    })
}

/// How long after the producers stopped every sink had delivered every
/// acked record (by its receiver and by `ctl stats`), and a note for each
/// sink or receiver whose counts disagree.
fn fanout_settled(
    label: &str,
    names: &[&str],
    receivers: &[Receiver],
    admin: &Path,
    acked: u64,
) -> Result<(Duration, Vec<String>), LoadError> {
    let mut counted = BTreeMap::new();
    let drain_after_stop = wait_for(
        &format!("{label}: every sink delivering every acked record"),
        Duration::from_millis(5),
        || {
            if receivers.iter().any(|r| r.records() < acked) {
                return Ok(false);
            }
            counted = sink_delivered(admin)?;
            Ok(names
                .iter()
                .all(|n| counted.get(*n).is_some_and(|&d| d >= acked)))
        },
    )?;
    let mut notes = Vec::new();
    for (name, r) in names.iter().zip(receivers) {
        let daemon_count = counted.get(*name).copied().unwrap_or(0);
        if r.records() != acked || daemon_count != acked {
            notes.push(format!(
                "sink {name}: {acked} acked, the receiver got {}, ctl stats counts {daemon_count}",
                r.records()
            ));
        }
        if r.bad_requests() > 0 || r.unstamped() > 0 {
            notes.push(format!(
                "receiver {name}: {} requests refused, {} records without a stamp",
                r.bad_requests(),
                r.unstamped()
            ));
        }
    }
    Ok((drain_after_stop, notes))
}

impl FanoutPhase {
    fn p50_us(&self) -> f64 {
        self.ack_latency.value_at_quantile(0.5) as f64 / 1000.0
    }

    fn p99_us(&self) -> f64 {
        self.ack_latency.value_at_quantile(0.99) as f64 / 1000.0
    }

    fn read_bytes_per_record(&self) -> Option<f64> {
        self.read_bytes.map(|b| b as f64 / self.acked.max(1) as f64)
    }

    /// The phase's row: ingest rate and ack latency, each sink's delivery.
    fn row(&self, name: &str) -> ReportRow {
        let mut o = ReportRow::new(name, Kind::Scenario);
        let ingest = self.acked as f64 / self.seconds;
        o.set(RATE, ingest)
            .set("offered_records_per_s", FANOUT_OFFERED_PER_S)
            .set("records", self.acked as f64)
            .set("elapsed_s", self.seconds)
            .set("sinks", self.delivered.len() as f64)
            .set("nacks", self.nacks as f64)
            .set(
                "drain_after_stop_ms",
                self.drain_after_stop.as_secs_f64() * 1000.0,
            )
            .set("rss_peak_mib", self.rss_peak_kib as f64 / 1024.0)
            .set_latency("", &self.ack_latency);
        let mut min_ratio = f64::INFINITY;
        for (sink, delivered) in FANOUT_SINKS.iter().zip(&self.delivered) {
            let ratio = *delivered as f64 / self.acked.max(1) as f64;
            min_ratio = min_ratio.min(ratio);
            o.set(
                &format!("delivered_per_s_{sink}"),
                *delivered as f64 / self.seconds,
            )
            .set(&format!("delivery_ratio_{sink}"), ratio);
        }
        o.set("delivery_ratio_min", min_ratio);
        if let Some(per_record) = self.read_bytes_per_record() {
            o.set("read_bytes_per_record", per_record);
        }
        for note in &self.notes {
            o.note(note.clone());
        }
        o
    }
}

/// The same paced Sync ingest (20,000 records/s of 256 B) into a fresh
/// daemon with one HTTP sink and into one with three, alternating which
/// goes first from one repeat to the next. Two rows, `/one_sink` and
/// `/three_sinks`; the second holds the comparisons.
pub fn fanout_3(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let warmup = if ctx.quick {
        FANOUT_WARMUP_QUICK
    } else {
        FANOUT_WARMUP
    };
    let measured = ctx.plan.duration;
    let phase = |sinks: usize| fanout_phase(launcher, sinks, warmup, measured);
    let (one, three) = if ctx.round.is_multiple_of(2) {
        let one = phase(1)?;
        (one, phase(FANOUT_SINKS.len())?)
    } else {
        let three = phase(FANOUT_SINKS.len())?;
        (phase(1)?, three)
    };
    let one_row = one.row("e2e_fanout_3/one_sink");
    let mut o = three.row("e2e_fanout_3/three_sinks");
    o.set("one_sink_p50_us", one.p50_us())
        .set("one_sink_p99_us", one.p99_us())
        .set("p50_ratio", three.p50_us() / one.p50_us())
        .set("p99_ratio", three.p99_us() / one.p99_us())
        .set("one_sink_records_per_s", one.acked as f64 / one.seconds);
    if let (Some(r1), Some(r3)) = (one.read_bytes_per_record(), three.read_bytes_per_record()) {
        // What each sink beyond the first adds to the daemon's reads, per
        // record: about one stored record if every sink reads the segments once.
        let extra = (FANOUT_SINKS.len() - 1) as f64;
        o.set("read_bytes_per_record_per_extra_sink", (r3 - r1) / extra);
    }
    Ok(vec![one_row, o])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_sink_table_names_the_library_and_the_file() {
        let plugin = plugin_sink(Path::new("/x/lib a.so"));
        let value: toml::Value = toml::from_str(&format!("[sink]\n{plugin}")).unwrap();
        assert_eq!(
            value["sink"]["options"]["path"].as_str(),
            Some(DELIVERED_FILE)
        );
        assert_eq!(value["sink"]["path"].as_str(), Some("/x/lib a.so"));
    }

    #[test]
    fn delivered_lines() {
        let stats = "wab_bytes_used 1\nsink{sink=\"default\",shard=\"0\"}.delivered_records 10\nsink{sink=\"default\",shard=\"0\"}.delivered_batches 2\nsink{sink=\"default\",shard=\"1\"}.delivered_records 5\nsink{sink=\"default\"}.delivered_records 15\n";
        assert_eq!(parse_delivered(stats), 15);
    }

    #[test]
    fn per_sink_delivered_totals() {
        let stats = "delivered_records 7\nsink{sink=\"a\"} \"http http://x\"\nsink{sink=\"a\"}.delivered_records 30\nsink{sink=\"a\",shard=\"0\"}.delivered_records 10\nsink{sink=\"a\",shard=\"1\"}.delivered_records 20\nsink{sink=\"b_2\"}.delivered_batches 3\nsink{sink=\"b_2\"}.delivered_records 25\nsink{sink=\"c\"}.delivered_records x\n";
        let totals = parse_sink_delivered(stats);
        assert_eq!(
            totals,
            BTreeMap::from([("a".to_string(), 30), ("b_2".to_string(), 25)])
        );
        // The per-shard lines are what `parse_delivered` sums.
        assert_eq!(parse_delivered(stats), 30);
    }

    #[test]
    fn fanout_sink_tables_are_named_a_b_c() {
        let urls = vec![
            "http://127.0.0.1:9/a".to_string(),
            "http://127.0.0.1:9/b".to_string(),
        ];
        let sinks = fanout_sinks(&urls);
        let names: Vec<&str> = sinks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let text = daemon::named_sinks_section(&sinks);
        let value: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            value["sinks"]["b"]["url"].as_str(),
            Some("http://127.0.0.1:9/b")
        );
        assert_eq!(value["sinks"]["a"]["delivery"].as_str(), Some("batched"));
    }

    #[test]
    fn backlog_trend_windows() {
        let samples: Vec<i64> = (1..=30).collect();
        assert_eq!(backlog_windows(&samples), (5.0, 30.0));
        assert_eq!(backlog_windows(&[3, 1, 4, 1, 5]), (3.0, 5.0));
        assert_eq!(backlog_windows(&[-2]), (0.0, 0.0));
        assert_eq!(backlog_windows(&[]), (0.0, 0.0));
    }

    #[test]
    fn gaps_around_a_window() {
        let acks = [0, 10, 20, 100, 105, 300];
        assert_eq!(longest_gap(&acks, 0, 99), 10);
        assert_eq!(longest_gap(&acks, 0, 100), 80);
        assert_eq!(longest_gap(&acks, 101, 1000), 195);
        assert_eq!(longest_gap(&acks, 400, 500), 0);
    }
}
