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
    /// Per-shard health.
    Health,
    /// Counters: connections, nacks, WAB bytes, fsyncs, delivery.
    Stats,
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
}

#[derive(Subcommand)]
pub enum DeadLetterAction {
    /// List dead letters: identity SHARD:SEQ, reason, payload preview.
    List,
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
) -> Result<String, String> {
    let Options { json, timeout } = options;
    let timeout = match timeout {
        None if matches!(command, CtlCommand::Reload) => RELOAD_TIMEOUT_DEFAULT,
        None => spillway_ctl::TIMEOUT_DEFAULT,
        Some(s) if s.is_finite() && (0.1..=3600.0).contains(&s) => Duration::from_secs_f64(s),
        Some(s) => return Err(format!("--timeout {s}: give seconds in 0.1..=3600")),
    };
    let limits = Limits {
        timeout,
        ..Limits::default()
    };
    let socket = match admin_socket {
        Some(s) => s,
        None if matches!(command, CtlCommand::Reload) => reload_socket(config_path, config)?,
        None => config()?.admin.socket_path,
    };
    let line = match command {
        CtlCommand::Top { interval, count } => {
            if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
                return Err(format!("--interval {interval}: give seconds in 0.1..=3600"));
            }
            crate::top::run(&socket, Duration::from_secs_f64(interval), count, limits)?;
            return Ok(String::new());
        }
        CtlCommand::Health => "health".to_string(),
        CtlCommand::Stats => "stats".to_string(),
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
        },
        CtlCommand::DeadLetter { sink, action } => {
            let line = match action {
                DeadLetterAction::List => "dead-letter list".to_string(),
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
    spillway_ctl::call_with(&socket, &line, limits)
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
            admin_socket_in("[sink]\ntype = \"kafka\"\n"),
            Some(AdminConfig::default().socket_path)
        );
        assert_eq!(admin_socket_in("[admin\nsocket_path = 1"), None);
        assert_eq!(admin_socket_in("[admin]\nsocket_path = 1\n"), None);
        assert_eq!(admin_socket_in("admin = 3\n"), None);
    }
}
