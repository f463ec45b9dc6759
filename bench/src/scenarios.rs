//! The scenario list. Names match weir's reports. To add a scenario, add an
//! entry to [`SCENARIOS`]: a standard [`Workload`], or `Workload::Custom`
//! with a function that returns its own rows. A standard workload run for
//! at least [`sustained::SUSTAINED_MIN`] is also watched second by second
//! (sustained mode).

use std::path::Path;
use std::time::Duration;

use spillway_client::Tier;

use super::context::Ctx;
use super::daemon::{Overrides, RssSampler};
use super::delivery_rate;
use super::e2e;
use super::fairness;
use super::hostile;
use super::http_door;
use super::idle_conns;
use super::jetstream;
use super::kafka;
use super::load::{self, LoadError, Plan, Sample};
use super::report::ReportRow;
use super::restart;
use super::sql;
use super::sustained::{self, Sampler};
use super::sweep;
use super::tap;
use super::tcp_door;

use sink_sdk::units::MIB;
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// The load a scenario applies. All records are [`load::PAYLOAD`] (5 bytes).
pub enum Workload {
    /// One connection, one Push at a time.
    Serial(Tier),
    /// One connection, one PushBatch of this many records at a time.
    Batch(Tier, usize),
    /// One connection, Pushes pipelined this deep.
    Pipelined(Tier, usize),
    /// This many connections (threads), each pushing serially; `rss` samples
    /// the daemon's peak resident memory meanwhile.
    Herd {
        tier: Tier,
        connections: usize,
        rss: bool,
    },
    /// Anything else; returns its own rows.
    Custom(fn(&Ctx) -> Result<Vec<ReportRow>, LoadError>),
}

pub struct Scenario {
    pub name: &'static str,
    pub workload: Workload,
    /// Needs a daemon the bench starts (a config of its own): skipped with `--socket`.
    pub needs_own_daemon: bool,
    /// Runs at most this many times whatever `--repeat` says (a long run
    /// that is a sample of many seconds by itself).
    pub max_repeats: Option<usize>,
    /// Runs only when `--scenario` names it (it writes gigabytes).
    pub by_name_only: bool,
}

const fn plain(name: &'static str, workload: Workload) -> Scenario {
    Scenario {
        name,
        workload,
        needs_own_daemon: false,
        max_repeats: None,
        by_name_only: false,
    }
}

/// A scenario of its own against the bench daemon (or `--socket`).
const fn custom(
    name: &'static str,
    run: fn(&Ctx) -> Result<Vec<ReportRow>, LoadError>,
) -> Scenario {
    plain(name, Workload::Custom(run))
}

/// A scenario with daemons (and sinks) of its own.
const fn own(
    name: &'static str,
    run: fn(&Ctx) -> Result<Vec<ReportRow>, LoadError>,
    max_repeats: Option<usize>,
) -> Scenario {
    Scenario {
        name,
        workload: Workload::Custom(run),
        needs_own_daemon: true,
        max_repeats,
        by_name_only: false,
    }
}

/// [`own`], run only when `--scenario` names it.
const fn own_by_name(
    name: &'static str,
    run: fn(&Ctx) -> Result<Vec<ReportRow>, LoadError>,
) -> Scenario {
    Scenario {
        by_name_only: true,
        ..own(name, run, Some(1))
    }
}

/// Every scenario, in run order.
pub const SCENARIOS: &[Scenario] = &[
    plain("single_thread_sync", Workload::Serial(Tier::Sync)),
    plain("single_thread_buffered", Workload::Serial(Tier::Buffered)),
    plain(
        "pipelined_sync_w1024",
        Workload::Pipelined(Tier::Sync, 1024),
    ),
    plain("batch_durable_n256", Workload::Batch(Tier::Sync, 256)),
    plain("batch_durable_n1024", Workload::Batch(Tier::Sync, 1024)),
    plain("batch_buffered_n256", Workload::Batch(Tier::Buffered, 256)),
    plain(
        "batch_buffered_n1024",
        Workload::Batch(Tier::Buffered, 1024),
    ),
    plain(
        "thundering_herd_16",
        Workload::Herd {
            tier: Tier::Sync,
            connections: 16,
            rss: false,
        },
    ),
    plain(
        "thundering_herd_64",
        Workload::Herd {
            tier: Tier::Sync,
            connections: 64,
            rss: true,
        },
    ),
    custom("payload_sweep", sweep::payload_sweep),
    custom("big_record_fairness", fairness::big_record_fairness),
    own("segment_1mib_vs_default", segment_compare, None),
    own("e2e_slow_downstream", e2e::slow_downstream, Some(1)),
    own(
        "e2e_batched_vs_per_record",
        e2e::batched_vs_per_record,
        None,
    ),
    own("e2e_light_load_latency", e2e::light_load_latency, Some(1)),
    own("ingest_http_vs_noop", e2e::ingest_http_vs_noop, None),
    own("ingest_http_door", http_door::ingest_http_door, None),
    own("tcp_tls_door", tcp_door::tcp_tls_door, None),
    own(
        "sink_plugin_vs_builtin_file",
        e2e::plugin_vs_builtin_file,
        None,
    ),
    own("reload_under_load", e2e::reload_under_load, None),
    own("e2e_fanout_3", e2e::fanout_3, None),
    own("e2e_high_latency", e2e::high_latency, Some(1)),
    own("e2e_jetstream", jetstream::jetstream, Some(1)),
    own("e2e_kafka", kafka::kafka, Some(1)),
    own("e2e_postgres", sql::e2e_postgres, None),
    own("e2e_mariadb", sql::e2e_mariadb, None),
    own("hostile", hostile::hostile, None),
    own("idle_connections", idle_conns::idle_connections, Some(1)),
    own("delivery_keeps_up", delivery_rate::delivery_keeps_up, None),
    own("tap_under_load", tap::tap_under_load, None),
    own_by_name("restart_backlog", restart::restart_backlog),
];

/// Runs one workload against `socket`.
fn measure(workload: &Workload, socket: &Path, plan: Plan) -> Result<Sample, LoadError> {
    match *workload {
        Workload::Serial(tier) => load::serial_push(socket, tier, plan),
        Workload::Batch(tier, n) => load::serial_batch(socket, tier, n, plan),
        Workload::Pipelined(tier, window) => load::pipelined_push(socket, tier, window, plan),
        Workload::Herd {
            tier, connections, ..
        } => load::herd(socket, tier, connections, plan),
        Workload::Custom(_) => Err(LoadError::Failed(
            "a custom workload has no single sample".into(),
        )),
    }
}

impl Scenario {
    /// One repeat of the scenario: its rows.
    pub fn run_once(&self, ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
        if let Workload::Custom(run) = self.workload {
            return run(ctx);
        }
        let (sampler, why_not) = sustained_sampler(ctx);
        let mut row = match self.workload {
            Workload::Herd { rss: true, .. } => self.with_rss(ctx)?,
            ref w => measure(w, ctx.socket, ctx.plan)?.to_outcome(self.name),
        };
        if let Some(why) = why_not {
            row.note(why);
        }
        match sampler.map(Sampler::finish) {
            Some(Ok(timeline)) => {
                row.set_drift(timeline.drift());
                row.timeline = Some(timeline);
            }
            Some(Err(e)) => {
                row.note(format!(
                    "sustained: reading the daemon's metrics failed: {e}"
                ));
            }
            None => {}
        }
        Ok(vec![row])
    }

    /// Measures while sampling the daemon's VmRSS; reports the peak.
    fn with_rss(&self, ctx: &Ctx) -> Result<ReportRow, LoadError> {
        let Some(pid) = ctx.pid else {
            let mut o = measure(&self.workload, ctx.socket, ctx.plan)?.to_outcome(self.name);
            o.note("RSS not sampled: the daemon was not started by the bench (--socket)");
            return Ok(o);
        };
        let sampler = RssSampler::start(pid, RSS_SAMPLE_EVERY);
        let sample = measure(&self.workload, ctx.socket, ctx.plan);
        let peak_kib = sampler.finish();
        let mut o = sample?.to_outcome(self.name);
        o.set("rss_peak_mib", peak_kib as f64 / 1024.0);
        Ok(o)
    }
}

/// The per-second sampler of a sustained run (`None` for a short run), or
/// why a sustained run has none.
fn sustained_sampler(ctx: &Ctx) -> (Option<Sampler>, Option<String>) {
    if ctx.plan.duration < sustained::SUSTAINED_MIN {
        return (None, None);
    }
    let Some(admin) = ctx.admin_socket else {
        let why =
            "sustained: no per-second figures (the daemon's admin socket is unknown with --socket)";
        return (None, Some(why.into()));
    };
    match Sampler::start(admin) {
        Ok(sampler) => (Some(sampler), None),
        Err(e) => (None, Some(format!("sustained: no per-second figures: {e}"))),
    }
}

/// The workloads compared across segment sizes.
const SEGMENT_WORKLOADS: [(&str, Workload); 2] = [
    ("batch_durable_n1024", Workload::Batch(Tier::Sync, 1024)),
    (
        "pipelined_sync_w1024",
        Workload::Pipelined(Tier::Sync, 1024),
    ),
];

/// A second daemon with 1 MiB segments against the main one, alternating
/// which goes first from one repeat to the next.
fn segment_compare(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = ctx
        .launcher
        .ok_or_else(|| LoadError::Unsupported("needs a daemon started by the bench".into()))?;
    let small = launcher.start(
        "segment-1mib",
        &Overrides {
            segment_bytes: Some(MIB),
            ..Overrides::default()
        },
    )?;
    let mut rows = Vec::new();
    for (name, workload) in &SEGMENT_WORKLOADS {
        let (default, one_mib) = if ctx.round.is_multiple_of(2) {
            let d = measure(workload, ctx.socket, ctx.plan)?;
            (d, measure(workload, small.socket(), ctx.plan)?)
        } else {
            let s = measure(workload, small.socket(), ctx.plan)?;
            (measure(workload, ctx.socket, ctx.plan)?, s)
        };
        let mut o = one_mib.to_outcome(&format!("segment_1mib_vs_default/{name}"));
        o.set("default_records_per_s", default.rate())
            .set("ratio", one_mib.rate() / default.rate());
        if let Some(bytes) = launcher.segment_bytes {
            o.note(format!("\"default\" here is --segment-bytes {bytes}"));
        }
        rows.push(o);
    }
    small
        .stop()
        .map_err(|e| format!("stopping the 1 MiB daemon: {e}"))?;
    Ok(rows)
}
