//! `spillway ctl`: the subcommands and the command line each sends to the
//! admin socket. The line protocol itself (sending, unframing the reply) is
//! `spillway_ctl`'s, shared with the bench; the daemon's side is
//! [`crate::admin`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use spillway_ctl::Limits;

use crate::config::{AdminConfig, Config};

#[derive(Subcommand)]
pub enum CtlCommand {
    /// Per-shard health and the verdict.
    ///
    /// Exits 0 when ready, 3 when ready but degraded (a sink retries, failed or stalled), 1 when running but not ready (a shard cannot take writes), 2 when the daemon cannot be reached.
    Health,
    /// Counters, grouped: ingest, the WAB per shard, delivery per sink and shard, dead letters, reloads.
    ///
    /// With units and average rates since the start. Scripts: `--json` (one object), or `--flat`.
    Stats {
        /// One `key value` line per counter (`shard{shard="0"}.fsyncs 12`), for grep and awk.
        #[arg(long)]
        flat: bool,
    },
    /// The same counters (and the latency histograms) in the Prometheus (OpenMetrics) text format.
    Metrics,
    /// Per shard: segment files (open or sealed, bytes, first seq, how much is confirmed), positions, oldest pending age.
    Segments,
    /// Records a sink rejected for good (each sink has its own store).
    DeadLetter {
        /// The sink whose dead letters to act on (may be left out when
        /// there is only one).
        #[arg(long, global = true)]
        sink: Option<String>,
        #[command(subcommand)]
        action: DeadLetterAction,
    },
    /// Steer one sink: pause or resume its delivery, or rewind its cursors
    /// to replay records the shards still hold.
    Sink {
        #[command(subcommand)]
        action: SinkAction,
    },
    /// Re-read the config file: add, change and remove sinks without a restart.
    Reload,
    /// A live view, refreshed every interval: ingest and delivery rates, backlog, oldest pending age, fsync p99, sink state (plain lines when not on a terminal).
    Top {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Print records as they are acknowledged to producers (or, with
    /// --sink, as that sink confirms them), until --limit or Ctrl-C.
    ///
    /// One line per record: SHARD:SEQ TIER PAYLOAD (control characters
    /// escaped; a payload that is not UTF-8 as base64), or one JSON object
    /// with --json (`payload`, or `payload_base64`). Producers never wait
    /// for the tap: past --rate records a second the rest are skipped, and
    /// a reader slower than the records loses lines; both are counted on
    /// `# ` lines on stderr (JSON: objects with `skipped` and `dropped`).
    Tap {
        /// Records as this sink confirms them (delivered; not those it
        /// dead-letters).
        #[arg(long)]
        sink: Option<String>,
        /// Only records pushed at this tier.
        #[arg(long, value_parser = ["sync", "batched", "buffered"])]
        tier: Option<String>,
        /// Stop after this many records (default: until interrupted).
        #[arg(long)]
        limit: Option<u64>,
        /// Records shown a second at most (0: no cap; the reader's pace
        /// then decides what is dropped).
        #[arg(long, default_value_t = 100)]
        rate: u64,
    },
}

#[derive(Subcommand)]
pub enum SinkAction {
    /// Hold the sink on every shard (remembered across restarts); its
    /// records are kept and count against wab.wab_bytes_max.
    Pause { name: String },
    /// Deliver again after a pause.
    Resume { name: String },
    /// Move the sink's cursors back over records still held, so they are
    /// delivered to it (and only it) again.
    Rewind {
        name: String,
        /// `oldest` (the oldest record each shard holds) or a sequence
        /// number (with --shard).
        #[arg(long)]
        to: String,
        /// Only this shard.
        #[arg(long)]
        shard: Option<u32>,
    },
    /// Read back the last records the sink's downstream holds (a nats
    /// sink's JetStream stream, a kafka sink's topic), oldest first,
    /// without the downstream's own tools and without changing anything
    /// there.
    ///
    /// One line per message: where the downstream keeps it (nats:
    /// STREAM:SEQ SUBJECT; kafka: TOPIC/PARTITION@OFFSET, committed
    /// records only), then SHARD:SEQ (the spillway record it is, from its
    /// headers) and the payload. Reads the config's sink table and
    /// connects as the sink does: the daemon need not run.
    Tail {
        name: String,
        /// How many of the newest messages (of the whole topic, for
        /// kafka: merged across partitions by their timestamps).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        limit: u64,
    },
}

#[derive(Subcommand)]
pub enum DeadLetterAction {
    /// List dead letters, oldest first: identity SHARD:SEQ, reason,
    /// payload preview.
    List {
        /// Show at most this many (0: all; the answer must still fit the
        /// reply limit). The count of all is shown either way.
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Push dead letters back for delivery (`all` or SHARD:SEQ ...).
    Requeue {
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Delete dead letters for good (`all` or SHARD:SEQ ...).
    Drop {
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// How `ctl` asks: `json` for one JSON document, `timeout` (seconds) to
/// override the deadline of each call.
pub struct Options {
    pub json: bool,
    pub timeout: Option<f64>,
}

/// A reload waits for the new sink to be built and health-checked, up to
/// `sink.build_timeout_ms` (10 s by default) in the daemon.
const RELOAD_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Why `spillway ctl` did not do what it was asked; its exit status says
/// which (docs/operations.md, `man spillway-ctl`).
#[derive(Debug)]
pub enum Failure {
    /// The daemon was asked and said no (exit 1).
    Refused(String),
    /// The daemon could not be asked: no config or socket, nobody
    /// listening, a timeout, a bad option (exit 2, as for a usage error).
    NotAsked(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Refused(m) | Failure::NotAsked(m) => m,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Refused(_) => EXIT_REFUSED,
            Failure::NotAsked(_) => EXIT_NOT_ASKED,
        }
    }
}

impl From<spillway_ctl::CallError> for Failure {
    fn from(e: spillway_ctl::CallError) -> Self {
        match e {
            spillway_ctl::CallError::Refused(m) => Failure::Refused(m),
            spillway_ctl::CallError::Unreachable(m) => Failure::NotAsked(m),
        }
    }
}

/// `ctl health`: ready. Every other subcommand: done.
pub const EXIT_OK: u8 = 0;
/// `ctl health`: the daemon runs but is not ready. Every other
/// subcommand: the daemon refused (its reason is printed).
pub const EXIT_REFUSED: u8 = 1;
/// The daemon could not be asked (not running, its socket missing, a
/// timeout, a wrong option).
pub const EXIT_NOT_ASKED: u8 = 2;
/// `ctl health`: ready (takes writes) but degraded: a sink retries,
/// failed or stalled.
pub const EXIT_DEGRADED: u8 = 3;

/// `ctl health`'s exit status from its answer (text or `--json`): the
/// verdict line (`ready`, `degraded: ...`, `not ready: ...`) or the JSON's
/// `ready` and `status`. An answer that says neither is not ready.
pub fn health_exit(body: &str, json: bool) -> u8 {
    let verdict = if json {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                let ready = v.get("ready")?.as_bool()?;
                let status = v.get("status").and_then(|s| s.as_str()).unwrap_or("");
                Some(match (ready, status) {
                    (false, _) => "not ready",
                    (true, "degraded") => "degraded",
                    (true, _) => "ready",
                })
            })
            .unwrap_or("not ready")
    } else {
        let last = body
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        if last == "ready" {
            "ready"
        } else if last.starts_with("degraded: ") {
            "degraded"
        } else {
            "not ready"
        }
    };
    match verdict {
        "ready" => EXIT_OK,
        "degraded" => EXIT_DEGRADED,
        _ => EXIT_REFUSED,
    }
}

/// Send `command` to the admin socket (`admin_socket`, or the config's
/// `admin.socket_path`) and return the reply's body or the daemon's reason.
/// `config` loads `config_path` (or the embedded default when it is
/// `None`). With `json`, the daemon answers with one JSON document.
pub fn run(
    admin_socket: Option<PathBuf>,
    config_path: Option<&Path>,
    config: impl FnOnce() -> Result<Config, String>,
    command: CtlCommand,
    options: Options,
) -> Result<String, Failure> {
    let not_asked = Failure::NotAsked;
    let Options { json, timeout } = options;
    let timeout = match timeout {
        None if matches!(command, CtlCommand::Reload) => RELOAD_TIMEOUT_DEFAULT,
        None => spillway_ctl::TIMEOUT_DEFAULT,
        Some(s) if s.is_finite() && (0.1..=3600.0).contains(&s) => Duration::from_secs_f64(s),
        Some(s) => {
            return Err(not_asked(format!(
                "--timeout {s}: give seconds in 0.1..=3600"
            )))
        }
    };
    let limits = Limits {
        timeout,
        ..Limits::default()
    };
    if let CtlCommand::Sink {
        action: SinkAction::Tail { name, limit },
    } = &command
    {
        return tail(&config().map_err(not_asked)?, name, *limit as usize, json);
    }
    let socket = match admin_socket {
        Some(s) => s,
        None if matches!(command, CtlCommand::Reload) => {
            reload_socket(config_path, config).map_err(not_asked)?
        }
        None => config().map_err(not_asked)?.admin.socket_path,
    };
    let line = match command {
        CtlCommand::Top { interval, count } => {
            if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
                return Err(not_asked(format!(
                    "--interval {interval}: give seconds in 0.1..=3600"
                )));
            }
            crate::top::run(&socket, Duration::from_secs_f64(interval), count, limits)
                .map_err(not_asked)?;
            return Ok(String::new());
        }
        CtlCommand::Tap {
            sink,
            tier,
            limit,
            rate,
        } => {
            let mut line = format!("tap --rate {rate}");
            for (name, v) in [("--sink", sink), ("--tier", tier)] {
                if let Some(v) = v {
                    line += &format!(" {name} {v}");
                }
            }
            if let Some(n) = limit {
                line += &format!(" --limit {n}");
            }
            if json {
                line += " --json";
            }
            tap(&socket, &line, json, limits)?;
            return Ok(String::new());
        }
        CtlCommand::Health => "health".to_string(),
        CtlCommand::Stats { flat: false } if !json => {
            let answer = spillway_ctl::ask(&socket, "stats --json", limits)?;
            let stats: serde_json::Value = serde_json::from_str(&answer)
                .map_err(|e| not_asked(format!("the daemon's stats are not JSON ({e})")))?;
            return Ok(crate::stats_view::render(&stats));
        }
        CtlCommand::Stats { .. } => "stats".to_string(),
        CtlCommand::Metrics => "metrics".to_string(),
        CtlCommand::Segments => "segments".to_string(),
        CtlCommand::Reload => "reload".to_string(),
        CtlCommand::Sink { action } => match action {
            SinkAction::Pause { name } => format!("sink pause {name}"),
            SinkAction::Resume { name } => format!("sink resume {name}"),
            SinkAction::Rewind { name, to, shard } => match shard {
                Some(n) => format!("sink rewind {name} --to {to} --shard {n}"),
                None => format!("sink rewind {name} --to {to}"),
            },
            SinkAction::Tail { .. } => unreachable!("answered above, without the daemon"),
        },
        CtlCommand::DeadLetter { sink, action } => {
            let line = match action {
                DeadLetterAction::List { limit } => format!("dead-letter list --limit {limit}"),
                DeadLetterAction::Requeue { ids } => {
                    format!("dead-letter requeue {}", ids.join(" "))
                }
                DeadLetterAction::Drop { ids } => format!("dead-letter drop {}", ids.join(" ")),
            };
            match sink {
                Some(name) => format!("{line} --sink {name}"),
                None => line,
            }
        }
    };
    let line = if json { line + " --json" } else { line };
    Ok(spillway_ctl::ask(&socket, &line, limits)?)
}

/// `ctl sink tail NAME`: the downstream's newest `limit` records of sink
/// `name`, as lines or one JSON document.
fn tail(cfg: &Config, name: &str, limit: usize, json: bool) -> Result<String, Failure> {
    let sink = cfg.sinks.get(name).ok_or_else(|| {
        Failure::NotAsked(format!(
            "no sink {name:?} in the config; sinks: {}",
            cfg.sinks.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let records =
        spillway_sinks::read_back(sink, limit).map_err(|e| Failure::Refused(e.to_string()))?;
    if json {
        let records: Vec<serde_json::Value> = records
            .iter()
            .map(|r| {
                let mut v = serde_json::json!({ "at": r.at });
                if let Some((shard, seq)) = r.record {
                    v["shard"] = shard.into();
                    v["seq"] = seq.into();
                }
                crate::payload::set_json(&mut v, &r.payload);
                v
            })
            .collect();
        return Ok(serde_json::json!({ "sink": name, "records": records }).to_string() + "\n");
    }
    let mut out = String::new();
    for r in &records {
        out += &r.at;
        out += &match r.record {
            Some((shard, seq)) => format!(" {shard}:{seq} "),
            None => " -:- ".to_string(),
        };
        crate::payload::push_text(&mut out, &r.payload);
        out.push('\n');
    }
    if records.is_empty() {
        out = format!("sink {name}: the downstream holds no records\n");
    }
    Ok(out)
}

/// `ctl tap`: each record's line to stdout (the `# ` lines of what the
/// tap missed to stderr, unless `json`) until the daemon ends the stream
/// or stdout is closed (`| head`).
fn tap(socket: &Path, line: &str, json: bool, limits: Limits) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let mut ended = false;
    let mut reader_gone = false;
    spillway_ctl::stream(socket, line, limits, |l| {
        ended |= l.starts_with("# tap ended") || (json && l.contains("\"end\":true"));
        if !json && l.starts_with("# ") {
            eprintln!("{l}");
            return true;
        }
        reader_gone = writeln!(stdout, "{l}").is_err();
        !reader_gone
    })?;
    if !ended && !reader_gone {
        eprintln!("# the daemon closed the tap (it stopped or restarted)");
    }
    Ok(())
}

/// The admin socket `reload` asks. The daemon re-reads its own file and
/// gives its own verdict, so a local file that does not load (often the
/// very file being fixed) is no reason to refuse asking: its
/// `admin.socket_path` (or the default, if it sets none) is read from the
/// bare TOML. Only a file that does not even parse as TOML, or whose
/// `admin.socket_path` is not a string, stops here, and says so.
fn reload_socket(
    config_path: Option<&Path>,
    config: impl FnOnce() -> Result<Config, String>,
) -> Result<PathBuf, String> {
    let error = match config() {
        Ok(cfg) => return Ok(cfg.admin.socket_path),
        Err(e) => e,
    };
    let Some(path) = config_path else {
        return Err(error);
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return Err(error);
    };
    let Some(socket) = admin_socket_in(&text) else {
        return Err(format!(
            "the local file failed to parse before asking the daemon: {error}"
        ));
    };
    crate::logging::say_err(&format!(
        "spillway: {} does not load here ({error}); asking the daemon at {} for its own verdict",
        path.display(),
        socket.display()
    ));
    Ok(socket)
}

/// `admin.socket_path` of TOML `text` that need not be a valid config
/// (the default if it sets none); `None` if `text` is not TOML or the key
/// is not a string.
fn admin_socket_in(text: &str) -> Option<PathBuf> {
    let table: toml::Table = text.parse().ok()?;
    let Some(admin) = table.get("admin") else {
        return Some(AdminConfig::default().socket_path);
    };
    match admin.as_table()?.get("socket_path") {
        None => Some(AdminConfig::default().socket_path),
        Some(path) => path.as_str().map(PathBuf::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_socket_is_found_in_a_config_that_does_not_validate() {
        let text = "[wab]\nsegment_bytes_max = 5\n[admin]\nsocket_path = \"/run/a.sock\"\n";
        assert_eq!(admin_socket_in(text), Some(PathBuf::from("/run/a.sock")));
        assert_eq!(
            admin_socket_in("[sink]\ntype = \"kinesis\"\n"),
            Some(AdminConfig::default().socket_path)
        );
        assert_eq!(admin_socket_in("[admin\nsocket_path = 1"), None);
        assert_eq!(admin_socket_in("[admin]\nsocket_path = 1\n"), None);
        assert_eq!(admin_socket_in("admin = 3\n"), None);
    }
}
