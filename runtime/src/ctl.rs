//! `spillway ctl`: the subcommands and the command line each sends to the
//! admin socket. The line protocol itself (sending, unframing the reply) is
//! `spillway_ctl`'s, shared with the bench; the daemon's side is
//! [`crate::admin`].

use std::path::PathBuf;

use clap::Subcommand;

use crate::config::Config;

#[derive(Subcommand)]
pub enum CtlCommand {
    /// Per-shard health.
    Health,
    /// Counters: connections, nacks, WAB bytes, fsyncs, delivery.
    Stats,
    /// The same counters (and the fsync latency histogram) in Prometheus text format.
    Metrics,
    /// Records the sink rejected for good.
    DeadLetter {
        #[command(subcommand)]
        action: DeadLetterAction,
    },
    /// Re-read the config file and switch the sink without a restart.
    Reload,
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

/// Send `command` to the admin socket (`admin_socket`, or the config's
/// `admin.socket_path`) and return the reply's body or the daemon's reason.
/// With `json`, the daemon answers with one JSON document.
pub fn run(
    admin_socket: Option<PathBuf>,
    config: impl FnOnce() -> Result<Config, String>,
    command: CtlCommand,
    json: bool,
) -> Result<String, String> {
    let socket = match admin_socket {
        Some(s) => s,
        None => config()?.admin.socket_path,
    };
    let line = match command {
        CtlCommand::Health => "health".to_string(),
        CtlCommand::Stats => "stats".to_string(),
        CtlCommand::Metrics => "metrics".to_string(),
        CtlCommand::Reload => "reload".to_string(),
        CtlCommand::DeadLetter {
            action: DeadLetterAction::List,
        } => "dead-letter list".to_string(),
        CtlCommand::DeadLetter {
            action: DeadLetterAction::Requeue { ids },
        } => format!("dead-letter requeue {}", ids.join(" ")),
        CtlCommand::DeadLetter {
            action: DeadLetterAction::Drop { ids },
        } => format!("dead-letter drop {}", ids.join(" ")),
    };
    let line = if json { line + " --json" } else { line };
    spillway_ctl::call(&socket, &line)
}
