//! The `spillway` binary: `run` the daemon, `check` a config, talk to a
//! running daemon with `ctl`, `push` records to it, measure with `bench`,
//! `inspect` a data folder.
//!
//! This crate (folder `runtime/`, package `spillway`) is the binary. It
//! wires the libraries together: `config` (the TOML file) and `logging`,
//! which sit in its library target (`lib.rs`) only so that the fuzz targets
//! can reach the parser, and here `daemon` (start-up: ownership of the data folder
//! and sockets, recovery, the actors), `supervisor` (restarts, shutdown),
//! `sinks` (building the sink tables and running them) and `reload`,
//! `admin` (the admin socket and metrics), `ctl` (its client subcommands),
//! `check` (what `spillway check` tries beyond parsing), `inspect` (a data
//! folder, offline), `push` (a producer for the shell),
//! `notify` (systemd's readiness and watchdog), `top` (`ctl top`), `fd_limit`. `bench` is the
//! `spillway-bench` crate, behind the default `bench` feature.

mod admin;
mod check;
mod config_file;
mod ctl;
mod daemon;
mod fd_limit;
#[cfg(test)]
mod golden;
mod inspect;
mod manual;
mod notify;
mod payload;
mod plugin_kit;
mod push;
mod reference;
mod reload;
mod schema;
mod sinks;
mod stats_view;
mod supervisor;
mod table;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use spillway::{config, logging};

use crate::config::{Config, DEFAULT_CONFIG};
use crate::ctl::CtlCommand;

#[derive(Parser)]
#[command(
    name = "spillway",
    version,
    about = "A durable local write buffer: push over a Unix socket, acked when safe on disk, delivered downstream at least once."
)]
struct Cli {
    /// Say on stderr which config file the command uses, and why that one.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the config: --config, else $SPILLWAY_CONFIG, else ./spillway.toml, else /etc/spillway/spillway.toml, else the embedded default).
    Run {
        /// TOML configuration file (see above for the default).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Reload the [sink] table when the config file changes (also: SIGHUP, `spillway ctl reload`).
        #[arg(long, requires = "config")]
        watch_config: bool,
    },
    /// Check a configuration file: parse and validate it, then try what the daemon would touch (its folders, the sink) without starting it (prints the embedded default with --default).
    Check {
        /// TOML configuration file; if omitted: $SPILLWAY_CONFIG, ./spillway.toml, /etc/spillway/spillway.toml, else the embedded default.
        config: Option<PathBuf>,
        /// Print the embedded default configuration.
        #[arg(long)]
        default: bool,
        /// Only parse and validate: load no plugin, read no environment variable, touch neither the file system nor the network.
        #[arg(long)]
        no_environment: bool,
    },
    /// Measure: ingest scenarios plus disk and socket probes of this machine.
    #[cfg(feature = "bench")]
    Bench(spillway_bench::BenchArgs),
    /// Talk to a running daemon over its admin socket.
    ///
    /// Exits 0 when done (`health`: ready), 1 when the daemon refused (`health`: running but not ready), 2 when it could not be asked, 3 (`health` only) when ready but degraded.
    Ctl {
        /// The daemon's config file (for admin.socket_path); if omitted: $SPILLWAY_CONFIG, ./spillway.toml, /etc/spillway/spillway.toml, else the embedded default.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Admin socket path (overrides the config).
        #[arg(long)]
        admin_socket: Option<PathBuf>,
        /// Print the answer as one JSON document (an error as {"error": ...}).
        #[arg(long, global = true)]
        json: bool,
        /// Give up on the daemon after this many seconds (default 5; 30 for `reload`, which waits for the new sink's build).
        #[arg(long, global = true, value_name = "SECONDS")]
        timeout: Option<f64>,
        #[command(subcommand)]
        command: CtlCommand,
    },
    /// Push records (arguments, or stdin one per line) to a running daemon.
    Push(push::PushArgs),
    /// Write a new sink plugin crate, or check a built plugin against the contract.
    Plugin {
        #[command(subcommand)]
        command: plugin_kit::PluginCommand,
    },
    /// Print the shell completion script for bash, zsh or fish (e.g. `spillway completions bash > /etc/bash_completion.d/spillway`).
    Completions {
        #[arg(value_enum)]
        shell: manual::CompletionShell,
    },
    /// Write the man pages (spillway.1 and one per subcommand) into a folder, or print spillway.1 (`spillway man | man -l -`).
    Man {
        /// The folder to write every page into.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print the JSON Schema of spillway.toml, for editors that check TOML against one (taplo / Even Better TOML: `#:schema ./spillway.schema.json` on the config's first line).
    Schema {
        /// Also check each plugin sink's `[sink.options]` against the options its library declares (the libraries are loaded, no instance is made).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Read every record in a data folder (segment reader; no daemon needed).
    Inspect {
        /// The daemon's server.data_dir.
        data_dir: PathBuf,
        /// Print each record: its seq, pending or confirmed, tier and payload (lossy UTF-8).
        #[arg(long)]
        records: bool,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if let Err(e) = config_file::resolve_for(&mut cli.command, cli.verbose) {
        return fail(&e);
    }
    match cli.command {
        Command::Run {
            config,
            watch_config,
        } => {
            let (cfg, origin) = match load(config.as_ref()) {
                Ok(v) => v,
                Err(e) => return fail(&e),
            };
            logging::init(&cfg.log.level, cfg.log.format);
            // Every panic one line through the log, in its format.
            spillway_actors::panics::install_hook();
            match daemon::run(cfg, &origin, config, watch_config) {
                Ok(()) => ExitCode::SUCCESS,
                // Once: in the log when it shows errors (its format, its
                // timestamp), else as a plain line.
                Err(e) if tracing::enabled!(tracing::Level::ERROR) => {
                    tracing::error!("{e}");
                    ExitCode::FAILURE
                }
                Err(e) => fail(&e),
            }
        }
        Command::Check {
            config,
            default,
            no_environment,
        } => {
            if default {
                say(DEFAULT_CONFIG);
                return ExitCode::SUCCESS;
            }
            check::run(load(config.as_ref()), !no_environment)
        }
        #[cfg(feature = "bench")]
        Command::Bench(args) => {
            logging::init("warn", logging::LogFormat::Text);
            match spillway_bench::run(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Command::Ctl {
            config,
            admin_socket,
            json,
            timeout,
            command,
        } => {
            let health = matches!(command, CtlCommand::Health);
            match ctl::run(
                admin_socket,
                config.as_deref(),
                || Ok(load(config.as_ref())?.0),
                command,
                ctl::Options { json, timeout },
            ) {
                Ok(body) => {
                    say(&body);
                    if health {
                        ExitCode::from(ctl::health_exit(&body, json))
                    } else {
                        ExitCode::from(ctl::EXIT_OK)
                    }
                }
                Err(e) => {
                    if json {
                        say(&format!(
                            "{}\n",
                            serde_json::json!({ "error": e.message() })
                        ));
                    }
                    logging::say_err(&format!("spillway: {}", e.message()));
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::Push(args) => match push::run(args) {
            Ok(summary) => {
                say(&summary);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Plugin { command } => {
            logging::init("warn", logging::LogFormat::Text);
            match plugin_kit::run(command) {
                Ok(text) => {
                    say(&text);
                    ExitCode::SUCCESS
                }
                Err(text) => {
                    say(&text);
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            manual::completions(Cli::command(), shell, &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { out } => {
            let written = match &out {
                Some(dir) => manual::write_pages(&Cli::command(), dir).map(|names| {
                    for n in names {
                        say(&format!("{}\n", dir.join(n).display()));
                    }
                }),
                None => manual::pages(&Cli::command()).and_then(|pages| {
                    use std::io::Write;
                    std::io::stdout().write_all(&pages[0].1)
                }),
            };
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&format!("writing the man pages: {e}")),
            }
        }
        Command::Schema { config: None } => {
            say(&schema::text());
            ExitCode::SUCCESS
        }
        Command::Schema { config: Some(path) } => match schema_for(&path) {
            Ok(text) => {
                say(&text);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Inspect {
            data_dir,
            records,
            json,
        } => match inspect::run(&data_dir, records, json) {
            Ok(text) => {
                say(&text);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    }
}

fn load(path: Option<&PathBuf>) -> Result<(Config, String), String> {
    match path {
        Some(p) => Config::load(p)
            .map(|c| (c, p.display().to_string()))
            .map_err(config_file::explain_load_error),
        None => Ok((Config::embedded_default(), "embedded default".to_string())),
    }
}

/// `spillway schema --config FILE`: the schema with the options of every
/// plugin the config loads.
fn schema_for(path: &PathBuf) -> Result<String, String> {
    let (cfg, _) = load(Some(path))?;
    let mut plugins: Vec<schema::PluginOptions> = Vec::new();
    for sink in cfg.sinks.values() {
        let declared = spillway_sinks::declared_options(sink).map_err(|e| e.to_string())?;
        if let (Some(keys), Some(lib)) = (declared, sink.plugin_path()) {
            let path = lib.to_string_lossy().into_owned();
            if !plugins.iter().any(|p| p.path == path) {
                plugins.push(schema::PluginOptions { path, keys });
            }
        }
    }
    Ok(schema::text_of(&schema::schema_with(&plugins)))
}

fn fail(msg: &str) -> ExitCode {
    logging::say_err(&format!("spillway: {msg}"));
    ExitCode::FAILURE
}

/// Print `text` to stdout. A reader that went away (`spillway ctl stats |
/// head`) is no error; any other failure is said on stderr.
pub(crate) fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            logging::say_err(&format!("spillway: writing to stdout: {e}"));
        }
    }
}
