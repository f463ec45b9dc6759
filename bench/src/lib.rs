//! `spillway bench`: reproduces the standard scenarios against a daemon it
//! starts (or any weir v1 daemon at `--socket`), probes this machine's disk
//! and Unix sockets, and judges the results against targets relative to
//! those probes. See `docs/benchmarks.md`.
//!
//! The daemon binary links this crate behind its default `bench` feature and
//! hands `spillway bench` over to [`run`]; the bench starts that same binary
//! (`std::env::current_exe`) as the daemon it measures, and talks to it only
//! through its sockets and files, never by linking the daemon.
//!
//! Layout: this file holds the options and the orchestration; `context` is
//! what every scenario gets; `daemon` starts and stops bench daemons and
//! samples their memory; `load` drives the connections; `scenarios` lists
//! the scenarios, `e2e` (delivery, reload) and `hostile` (bad clients) are
//! the scenarios with their own daemons; `receiver` is the loopback HTTP
//! sink they deliver to, `stamped` its producers; `probes` measures the
//! machine; `report` prints the scenario table and JSON lines; `targets`
//! judges and prints the verdicts. `sweep` is the payload sweep,
//! `sustained` the per-second readings of a long run, `charts` draws the
//! SVG charts of `--charts`, and `progress` is everything said on stderr
//! while the bench runs (a bar on a terminal, plain lines elsewhere).

mod charts;
mod context;
mod daemon;
mod delivery_rate;
mod e2e;
mod fairness;
mod hostile;
mod http_door;
mod idle_conns;
mod jetstream;
mod kafka;
mod load;
mod probes;
mod progress;
mod receiver;
mod report;
mod restart;
mod scenarios;
/// The records and columns of `e2e_postgres` / `e2e_mariadb`, shared with
/// their bare loader (`bench/sql-loader`).
pub mod sql;
mod stamped;
mod sustained;
mod sweep;
mod tap;
mod targets;
mod tcp_door;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use context::Ctx;
use daemon::{BenchDaemon, Launcher};
use load::{LoadError, Plan};
use probes::ProbeCounts;
use report::{median_of, Kind, ReportRow, Status, P50, RATE};
use scenarios::{Scenario, SCENARIOS};

/// Every config file the bench writes for its daemons: the daemon's whole
/// file with each knob the bench varies, each `[sink]` table of the
/// end-to-end scenarios and the `[sinks.NAME]` tables of `e2e_fanout_3`. The daemon's tests check that it accepts them all
/// (the bench cannot: it does not link the daemon's config).
pub fn written_configs() -> Vec<String> {
    let dir = Path::new("/tmp/bench dir");
    let mut texts = vec![
        daemon::config_text(dir, None, None),
        daemon::config_text(dir, Some(1 << 20), Some(1000)),
    ];
    texts.extend(e2e::sink_tables().iter().map(|t| format!("[sink]\n{t}")));
    texts.extend(kafka::sink_tables().iter().map(|t| format!("[sink]\n{t}")));
    texts.extend(sql::sink_tables().iter().map(|t| format!("[sink]\n{t}")));
    let urls: Vec<String> = e2e::FANOUT_SINKS
        .iter()
        .map(|n| format!("http://127.0.0.1:9/{n}"))
        .collect();
    texts.push(daemon::named_sinks_section(&e2e::fanout_sinks(&urls)));
    texts
}

/// Options of `spillway bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Target an already running daemon at this socket instead of starting one
    /// (scenarios that need their own daemon config, and RSS, are skipped).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Run only this scenario (repeatable). The probes always run.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Run every scenario and probe N times and report the median of each figure.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Short runs for a smoke test (0.4 s per scenario run, fewer probe rounds).
    #[arg(long)]
    pub quick: bool,
    /// Measure each scenario run for this many seconds (default 3, --quick 0.4).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Also write JSON lines here: one object per scenario row, probe and target.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also draw SVG charts into this folder (created if need be):
    /// throughput, latency percentiles, the payload sweep, sustained runs.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,
    /// Folder for the bench's daemons and probe files (a temporary folder is
    /// made inside it and deleted at the end). Default: the system temp folder.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// wab.segment_bytes_max of the bench daemon (default: the daemon's default).
    #[arg(long, value_name = "BYTES")]
    pub segment_bytes: Option<u64>,
    /// server.shards of the bench daemon (0 = one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub shards: u32,
}

/// Durations and counts derived from the options.
struct Settings {
    plan: Plan,
    probes: ProbeCounts,
    repeat: usize,
    quick: bool,
}

impl Settings {
    fn from_args(args: &BenchArgs) -> Result<Settings, String> {
        let (seconds, warmup, probes) = if args.quick {
            (
                0.4,
                100,
                ProbeCounts {
                    fsyncs: 300,
                    batch_writes: 150,
                    bandwidth_writes: 32,
                    round_trips: 3000,
                },
            )
        } else {
            (
                3.0,
                300,
                ProbeCounts {
                    fsyncs: 1000,
                    batch_writes: 500,
                    bandwidth_writes: 128,
                    round_trips: 10_000,
                },
            )
        };
        let seconds = args.duration.unwrap_or(seconds);
        if seconds.is_nan() || seconds <= 0.0 || seconds > 3600.0 {
            return Err(format!("--duration {seconds}: allowed 0 < SECONDS <= 3600"));
        }
        let plan = Plan {
            duration: Duration::from_secs_f64(seconds),
            warmup,
        };
        Ok(Settings {
            plan,
            probes,
            repeat: args.repeat as usize,
            quick: args.quick,
        })
    }
}

/// The scenarios `--scenario` selects (when none is given, all but those
/// that run only by name).
fn select(names: &[String]) -> Result<Vec<&'static Scenario>, String> {
    if let Some(unknown) = names
        .iter()
        .find(|n| !SCENARIOS.iter().any(|s| s.name == n.as_str()))
    {
        let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        return Err(format!(
            "unknown scenario {unknown:?}; known: {}",
            known.join(", ")
        ));
    }
    Ok(SCENARIOS
        .iter()
        .filter(|s| {
            if names.is_empty() {
                !s.by_name_only
            } else {
                names.iter().any(|n| n == s.name)
            }
        })
        .collect())
}

/// The bench's own folder, deleted when dropped.
fn work_dir(data_dir: Option<&Path>) -> Result<tempfile::TempDir, String> {
    let parent = data_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    tempfile::Builder::new()
        .prefix("spillway-bench-")
        .tempdir_in(&parent)
        .map_err(|e| format!("creating a folder in {}: {e}", parent.display()))
}

fn summary(o: &ReportRow) -> String {
    let rate = o
        .get(RATE)
        .map(|r| format!("{} rec/s", report::thousands(r)))
        .unwrap_or_default();
    let p50 = o
        .get(P50)
        .map(|p| format!(", p50 {p:.1} µs"))
        .unwrap_or_default();
    // The within-run comparisons, so the spread over repeats shows on stderr.
    let ratios: String = [
        "ratio",
        "p50_ratio",
        "p99_ratio",
        "rss_peak_mib",
        "speedup",
        "delivery_ratio",
        "delivery_ratio_min",
        "max_ack_gap_ms",
        "mib_per_s",
        "batch_ratio",
        "fsync_p99_drift",
    ]
    .iter()
    .filter_map(|k| o.get(k).map(|v| format!(", {k} {v:.2}")))
    .collect();
    format!("{}: {rate}{p50}{ratios}", o.name)
}

/// Runs a probe `repeat` times; the median of each figure.
fn repeat_probe(
    name: &str,
    repeat: usize,
    mut probe: impl FnMut() -> Result<ReportRow, String>,
) -> ReportRow {
    let mut runs = Vec::new();
    for round in 1..=repeat {
        progress::step(name, round, repeat);
        let result = probe();
        progress::advance(1);
        match result {
            Ok(o) => runs.push(o),
            Err(e) => {
                progress::advance((repeat - round) as u64);
                return ReportRow::failed(name, Kind::Probe, e);
            }
        }
        progress::line(&format!("{name} {round}/{repeat} done"));
    }
    median_of(&runs)
}

/// The probes, in run order.
const PROBES: usize = 3;

fn run_probes(dir: &Path, s: &Settings) -> Vec<ReportRow> {
    vec![
        repeat_probe("disk_probe", s.repeat, || probes::disk_probe(dir, s.probes)),
        repeat_probe("disk_bandwidth", s.repeat, || {
            probes::bandwidth_probe(dir, s.probes)
        }),
        repeat_probe("socket_probe", s.repeat, || probes::socket_probe(s.probes)),
    ]
}

/// How many repeats `scenario` runs.
fn repeats_of(scenario: &Scenario, s: &Settings) -> usize {
    scenario
        .max_repeats
        .map_or(s.repeat, |max| max.min(s.repeat))
}

/// Steps of the progress bar: every repeat of every probe and scenario.
fn steps(selected: &[&Scenario], s: &Settings) -> u64 {
    let scenarios: usize = selected.iter().map(|sc| repeats_of(sc, s)).sum();
    (PROBES * s.repeat + scenarios) as u64
}

/// What the scenarios run against: a daemon the bench started, or `--socket`.
struct Subject {
    socket: PathBuf,
    launcher: Option<Launcher>,
    daemon: Option<BenchDaemon>,
}

impl Subject {
    fn open(args: &BenchArgs, work: &Path) -> Result<Subject, String> {
        if let Some(socket) = &args.socket {
            daemon::health(socket)?;
            return Ok(Subject {
                socket: socket.clone(),
                launcher: None,
                daemon: None,
            });
        }
        let exe =
            std::env::current_exe().map_err(|e| format!("finding the spillway executable: {e}"))?;
        let launcher = Launcher {
            exe,
            parent: work.to_path_buf(),
            shards: args.shards,
            segment_bytes: args.segment_bytes,
        };
        let daemon = launcher.start("daemon", &daemon::Overrides::default())?;
        Ok(Subject {
            socket: daemon.socket().to_path_buf(),
            launcher: Some(launcher),
            daemon: Some(daemon),
        })
    }

    fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(BenchDaemon::pid)
    }

    fn admin_socket(&self) -> Option<&Path> {
        self.daemon.as_ref().map(BenchDaemon::admin_socket)
    }

    /// The daemon's resident memory after start-up, before any load.
    fn idle_rss(&self) -> ReportRow {
        let Some(pid) = self.pid() else {
            return ReportRow::skipped(
                "daemon_rss",
                Kind::Probe,
                "the daemon was not started by the bench (--socket)".into(),
            );
        };
        std::thread::sleep(Duration::from_millis(300));
        match daemon::rss_kib(pid) {
            Some(kib) => {
                let mut o = ReportRow::new("daemon_rss", Kind::Probe);
                o.set("idle_mib", kib as f64 / 1024.0);
                o
            }
            None => ReportRow::failed(
                "daemon_rss",
                Kind::Probe,
                format!("no VmRSS in /proc/{pid}/status"),
            ),
        }
    }

    fn check_alive(&mut self) -> Result<(), String> {
        self.daemon
            .as_mut()
            .map_or(Ok(()), BenchDaemon::check_alive)
    }

    fn stop(self) -> Result<(), String> {
        self.daemon.map_or(Ok(()), BenchDaemon::stop)
    }
}

/// Rows of one scenario, each the median over its repeats.
fn run_scenario(scenario: &Scenario, subject: &Subject, s: &Settings) -> Vec<ReportRow> {
    let repeat = repeats_of(scenario, s);
    if scenario.needs_own_daemon && subject.launcher.is_none() {
        progress::advance(repeat as u64);
        let why = "needs a daemon config of its own; not possible with --socket".to_string();
        return vec![ReportRow::skipped(scenario.name, Kind::Scenario, why)];
    }
    let mut rows: Vec<Vec<ReportRow>> = Vec::new();
    for round in 0..repeat {
        let ctx = Ctx {
            socket: &subject.socket,
            admin_socket: subject.admin_socket(),
            pid: subject.pid(),
            launcher: subject.launcher.as_ref(),
            plan: s.plan,
            round,
            repeats: repeat,
            quick: s.quick,
        };
        progress::step(scenario.name, round + 1, repeat);
        let result = scenario.run_once(&ctx);
        progress::advance(1);
        let left = (repeat - round - 1) as u64;
        match result {
            Ok(outcomes) => collect_rows(&mut rows, outcomes, round, repeat),
            Err(LoadError::Unsupported(why)) => {
                progress::advance(left);
                progress::line(&format!("{} skipped: {why}", scenario.name));
                return vec![ReportRow::skipped(scenario.name, Kind::Scenario, why)];
            }
            Err(LoadError::Failed(e)) => {
                progress::advance(left);
                progress::line(&format!("{} failed: {e}", scenario.name));
                return vec![ReportRow::failed(scenario.name, Kind::Scenario, e)];
            }
        }
    }
    rows.iter().map(|runs| median_of(runs)).collect()
}

/// Every selected scenario in order; if the daemon dies, the rest are
/// marked failed rather than each failing to connect.
fn run_scenarios(selected: &[&Scenario], subject: &mut Subject, s: &Settings) -> Vec<ReportRow> {
    let mut outcomes = Vec::new();
    let mut dead: Option<String> = None;
    for scenario in selected {
        if let Some(why) = &dead {
            progress::advance(repeats_of(scenario, s) as u64);
            outcomes.push(ReportRow::failed(
                scenario.name,
                Kind::Scenario,
                why.clone(),
            ));
            continue;
        }
        outcomes.extend(run_scenario(scenario, subject, s));
        if let Err(e) = subject.check_alive() {
            progress::line(&e);
            dead = Some("not run: the daemon had exited".into());
        }
    }
    outcomes
}

/// Files each row of one repeat with the earlier repeats of the same row.
fn collect_rows(
    rows: &mut Vec<Vec<ReportRow>>,
    outcomes: Vec<ReportRow>,
    round: usize,
    repeat: usize,
) {
    for o in outcomes {
        progress::line(&format!("{} ({}/{repeat})", summary(&o), round + 1));
        match rows.iter_mut().find(|r| r[0].name == o.name) {
            Some(runs) => runs.push(o),
            None => rows.push(vec![o]),
        }
    }
}

/// `2026-06-13 14:05 UTC` from the system clock.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn describe_setup(args: &BenchArgs, s: &Settings, work: &Path) -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let target = match &args.socket {
        Some(socket) => format!("daemon at --socket {}", socket.display()),
        None => format!(
            "daemon started by the bench (shards {}, segment_bytes_max {}, noop sink; the e2e, ingest_http, sink_, reload_ and hostile scenarios start their own)",
            if args.shards == 0 { "= cores".to_string() } else { args.shards.to_string() },
            args.segment_bytes.map_or("default".to_string(), |b| b.to_string()),
        ),
    };
    format!(
        "spillway bench, {}; {cores} cores, Linux {}\n{target}; data in {}\n{} s per run, {} warm-up requests, median of {} repeats\n",
        utc_now(),
        kernel.trim(),
        work.display(),
        s.plan.duration.as_secs_f64(),
        s.plan.warmup,
        s.repeat,
    )
}

fn print_results(header: &str, outcomes: &[ReportRow], targets: &[targets::Target]) {
    println!("\n{header}");
    println!("{}", report::scenario_table(outcomes));
    println!("probes (medians):\n{}", report::probe_table(outcomes));
    println!("targets:\n{}", targets::table(targets));
}

fn write_json(
    path: &Path,
    header: &str,
    outcomes: &[ReportRow],
    targets: &[targets::Target],
) -> Result<(), String> {
    let meta = serde_json::json!({
        "kind": "meta",
        "setup": header.trim(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "unix_time": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    let mut lines = vec![meta];
    lines.extend(outcomes.iter().map(report::outcome_json));
    lines.extend(targets.iter().map(targets::json));
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let mut file =
        std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The lines under each chart's title: which run, and how it measured.
fn chart_subtitle(header: &str) -> Vec<String> {
    let lines: Vec<&str> = header.lines().collect();
    [0, 2]
        .iter()
        .filter_map(|&i| lines.get(i).map(|l| l.to_string()))
        .collect()
}

/// Probes, the daemon and the scenarios; every outcome (the daemon is
/// stopped at the end, its result second).
fn measure_all(
    args: &BenchArgs,
    selected: &[&Scenario],
    settings: &Settings,
    work: &Path,
) -> Result<(Vec<ReportRow>, Result<(), String>), String> {
    let mut outcomes = run_probes(work, settings);
    let mut subject = Subject::open(args, work)?;
    outcomes.push(subject.idle_rss());
    outcomes.extend(run_scenarios(selected, &mut subject, settings));
    let stopped = subject.stop();
    Ok((outcomes, stopped))
}

pub fn run(args: BenchArgs) -> Result<(), String> {
    let settings = Settings::from_args(&args)?;
    let selected = select(&args.scenarios)?;
    let work = work_dir(args.data_dir.as_deref())?;
    let header = describe_setup(&args, &settings, work.path());
    progress::start(steps(&selected, &settings));
    let measured = measure_all(&args, &selected, &settings, work.path());
    progress::finish();
    let (outcomes, stopped) = measured?;
    let targets = targets::evaluate(&outcomes);
    print_results(&header, &outcomes, &targets);
    if let Some(path) = &args.json {
        write_json(path, &header, &outcomes, &targets)?;
    }
    if let Some(dir) = &args.charts {
        let written = charts::write(dir, &chart_subtitle(&header), &outcomes)?;
        println!("charts:");
        for path in written {
            println!("{}", path.display());
        }
    }
    stopped.map_err(|e| format!("stopping the bench daemon: {e}"))?;
    let failed = outcomes
        .iter()
        .filter(|o| matches!(o.status, Status::Failed(_)))
        .count();
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} scenario(s) or probe(s) failed; see the table")),
    }
}
