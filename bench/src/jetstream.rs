//! `e2e_jetstream`: the NATS sink into a real 3-node JetStream cluster on
//! loopback (spillway-test-nats), replicas 3, 256 B records.
//!
//! - `/pipelined`, `/one_in_flight`, `/http`: a backlog pushed while the
//!   sink is paused (`ctl sink pause`), then released and timed until the
//!   stream (or the HTTP receiver) has every record: the sink's rate with
//!   its default pipelining, with one publish awaiting its PubAck at a time
//!   (the way Vector's JetStream sink works), and the HTTP sink's rate on
//!   the same machine.
//! - `/failover`: a paced load while the stream's leader is SIGKILLed: the
//!   time from the kill until the stream grows again, and the backlog's
//!   peak; every acked record must be in the stream once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_client::Tier;
use spillway_test_nats::{Guard, NatsCluster};

use super::context::Ctx;
use super::daemon::Launcher;
use super::e2e::{
    drain_backlog, launcher, sleep_until, start, stop_daemon, toml_string, wait_for, PUSH_WINDOW,
    RECORD_BYTES,
};
use super::load::LoadError;
use super::report::{Kind, ReportRow, RATE};
use super::stamped::{self, Burst, Pace};

const PRODUCERS: usize = 4;
/// Records of the backlog phases (`--quick`: a fifth).
const BACKLOG_RECORDS: u64 = 100_000;
/// One publish at a time is slow: it gets this share of the backlog.
const ONE_IN_FLIGHT_SHARE: u64 = 10;
/// The failover phase: offered rate, length, and when the leader dies.
const FAILOVER_RATE: f64 = 10_000.0;
const FAILOVER_LENGTH: Duration = Duration::from_secs(12);
const FAILOVER_KILL_AT: Duration = Duration::from_secs(4);
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// The streams remember message ids this long: longer than any phase.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// The `[sink]` body of a NATS sink into `stream` (subject
/// `STREAM.{shard}`).
fn nats_sink(servers: &str, stream: &str, extra: &str) -> String {
    format!(
        "type = \"nats\"\nservers = {servers}\nsubject = {}\nstream = {}\nserver_sync_always = true\nretry_initial_ms = 20\nretry_max_ms = 500\n{extra}",
        toml_string(&format!("{}.{{shard}}", stream.to_lowercase())),
        toml_string(stream)
    )
}

/// Pushes `count` records while the sink is paused, then resumes it and
/// times until the stream holds them all; records/s.
fn drain_into(
    launcher: &Launcher,
    cluster: &NatsCluster,
    stream: &str,
    extra: &str,
    count: u64,
) -> Result<f64, LoadError> {
    cluster.create_stream(
        stream,
        &[&format!("{}.>", stream.to_lowercase())],
        3,
        DUPLICATE_WINDOW,
    );
    // Given every node, the client connects to one at random, so a
    // phase's publishes went to its stream's leader or through a follower
    // and the two phases could compare different paths (one publish in
    // flight read 3,000-3,550 or 3,850-4,700 records/s from run to run;
    // docs/benchmarks.md). Each backlog phase publishes to its stream's
    // leader.
    let mut leader = None;
    wait_for(
        &format!("{stream}: a leader"),
        Duration::from_millis(20),
        || {
            leader = cluster.stream_leader(stream);
            Ok(leader.is_some())
        },
    )?;
    let servers = format!("[\"{}\"]", cluster.url(leader.unwrap()));
    let label = format!("e2e-{}", stream.to_lowercase());
    let daemon = start(launcher, &label, nats_sink(&servers, stream, extra))?;
    let (socket, admin) = (
        daemon.socket().to_path_buf(),
        daemon.admin_socket().to_path_buf(),
    );
    spillway_ctl::call(&admin, "sink pause default")
        .map_err(|e| LoadError::Failed(format!("pausing the sink: {e}")))?;
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let epoch = Instant::now();
    let per_producer = count / PRODUCERS as u64;
    let burst = |i: usize| Burst {
        producer: i as u64,
        count: per_producer,
        size: RECORD_BYTES,
        per_frame: 1,
        window: PUSH_WINDOW,
    };
    let producer = |i: usize| stamped::push_all(&socket, burst(i), epoch, &acked);
    let (sent, ()) = stamped::with_producers(PRODUCERS, &stop, producer, || ());
    let sent = sent?;
    spillway_ctl::call(&admin, "sink resume default")
        .map_err(|e| LoadError::Failed(format!("resuming the sink: {e}")))?;
    let elapsed = wait_for(
        &format!("{stream}: every record in the stream"),
        Duration::from_millis(2),
        || Ok(cluster.stream_messages(stream) >= sent.acked),
    )?;
    let stored = cluster.stream_messages(stream);
    stop_daemon(daemon, &label)?;
    if stored != sent.acked {
        return Err(LoadError::Failed(format!(
            "{stream}: {} acked, the stream holds {stored}",
            sent.acked
        )));
    }
    Ok(sent.acked as f64 / elapsed.as_secs_f64().max(1e-9))
}

/// What the failover phase saw.
struct Failover {
    acked: u64,
    stored: u64,
    resume: Option<Duration>,
    backlog_peak: u64,
}

/// A paced load into stream `FAILOVER` while its leader is SIGKILLed.
fn failover(launcher: &Launcher, cluster: &mut NatsCluster) -> Result<Failover, LoadError> {
    let stream = "FAILOVER";
    cluster.create_stream(stream, &["failover.>"], 3, DUPLICATE_WINDOW);
    let servers = cluster.servers_toml();
    let daemon = start(launcher, "e2e-failover", nats_sink(&servers, stream, ""))?;
    let socket = daemon.socket().to_path_buf();
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let epoch = Instant::now();
    let pace = |i: usize| Pace {
        producer: i as u64,
        rate: FAILOVER_RATE / PRODUCERS as f64,
        size: RECORD_BYTES,
        window: PUSH_WINDOW,
        tier: Tier::Sync,
        ack_times: false,
        latency_from_us: None,
    };
    let producer = |i: usize| stamped::paced(&socket, pace(i), epoch, &stop, &acked);
    let cluster_ref = &*cluster;
    let client = cluster.client();
    let count = || cluster_ref.messages_via(&client, stream);
    let (sent, seen) = stamped::with_producers(PRODUCERS, &stop, producer, || {
        let t0 = Instant::now();
        if !sleep_until(t0 + FAILOVER_KILL_AT, &stop) {
            return Err("the producers stopped early".to_string());
        }
        let leader = cluster_ref
            .stream_leader(stream)
            .ok_or("the stream has no leader to kill")?;
        let at_kill = count().ok_or("the stream does not answer before the kill")?;
        let killed_at = Instant::now();
        cluster_ref.signal_kill(leader);
        let (mut resume, mut peak) = (None, 0u64);
        while killed_at.elapsed() < FAILOVER_LENGTH - FAILOVER_KILL_AT {
            std::thread::sleep(SAMPLE_EVERY);
            // While the stream does not answer, what it holds is at
            // least what it held at the kill.
            let stored = count().unwrap_or(at_kill);
            peak = peak.max(acked.load(Ordering::Acquire).saturating_sub(stored));
            if resume.is_none() && stored > at_kill {
                resume = Some(killed_at.elapsed());
            }
        }
        Ok((leader, at_kill, killed_at, resume, peak))
    });
    let sent = sent?;
    let (leader, at_kill, killed_at, mut resume, backlog_peak) = seen.map_err(LoadError::Failed)?;
    if resume.is_none() {
        // The load ended first: wait for the first record after the kill.
        wait_for("delivery after the leader's kill", SAMPLE_EVERY, || {
            Ok(count().is_some_and(|n| n > at_kill))
        })?;
        resume = Some(killed_at.elapsed());
    }
    wait_for("the failover backlog", Duration::from_millis(5), || {
        Ok(count().is_some_and(|n| n >= sent.acked))
    })?;
    cluster.kill(leader);
    cluster.restart(leader);
    let stored = cluster.stream_messages(stream);
    stop_daemon(daemon, "e2e-failover")?;
    Ok(Failover {
        acked: sent.acked,
        stored,
        resume,
        backlog_peak,
    })
}

/// The four phases on one cluster; four rows, the pipelined one holding
/// the comparisons.
pub fn jetstream(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let mut cluster = NatsCluster::try_start(3, Guard::default())
        .map_err(|e| LoadError::Unsupported(format!("no NATS cluster: {e}")))?;
    let count = if ctx.quick {
        BACKLOG_RECORDS / 5
    } else {
        BACKLOG_RECORDS
    };
    let pipelined = drain_into(launcher, &cluster, "PIPELINED", "", count)?;
    let one = drain_into(
        launcher,
        &cluster,
        "ONE",
        "publishes_in_flight = 1\n",
        count / ONE_IN_FLIGHT_SHARE,
    )?;
    let http = drain_backlog(launcher, "batched", count)?;
    let http_rate = http.records as f64 / http.elapsed.as_secs_f64().max(1e-9);
    let f = failover(launcher, &mut cluster)?;

    let mut p = ReportRow::new("e2e_jetstream/pipelined", Kind::Scenario);
    p.set(RATE, pipelined)
        .set("records", count as f64)
        .set("one_in_flight_records_per_s", one)
        .set("speedup_vs_one_in_flight", pipelined / one.max(1e-9))
        .set("http_records_per_s", http_rate)
        .set("ratio_vs_http", pipelined / http_rate.max(1e-9));
    let mut o = ReportRow::new("e2e_jetstream/one_in_flight", Kind::Scenario);
    o.set(RATE, one)
        .set("records", (count / ONE_IN_FLIGHT_SHARE) as f64);
    let mut h = ReportRow::new("e2e_jetstream/http", Kind::Scenario);
    h.set(RATE, http_rate).set("records", http.records as f64);
    let mut fo = ReportRow::new("e2e_jetstream/failover", Kind::Scenario);
    fo.set(RATE, FAILOVER_RATE)
        .set("records", f.acked as f64)
        .set("lost_records", f.acked.saturating_sub(f.stored) as f64)
        .set("duplicates", f.stored.saturating_sub(f.acked) as f64)
        .set("backlog_peak", f.backlog_peak as f64);
    if let Some(d) = f.resume {
        fo.set("resume_after_kill_ms", d.as_secs_f64() * 1000.0);
    } else {
        fo.note("delivery did not resume before the load ended");
    }
    Ok(vec![p, o, h, fo])
}
